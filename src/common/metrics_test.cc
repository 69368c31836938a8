#include "common/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

namespace tessera::metrics {
namespace {

TEST(MetricsTest, NamesFollowThePrometheusGrammar) {
  EXPECT_TRUE(IsValidMetricName("tessera_chips_total"));
  EXPECT_TRUE(IsValidMetricName("a:b_c9"));
  EXPECT_FALSE(IsValidMetricName("9lives"));
  EXPECT_FALSE(IsValidMetricName("has-dash"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_TRUE(IsValidLabelName("generation"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
}

TEST(MetricsTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapeHelp("say \"hi\"\\\n"), "say \"hi\"\\\\\\n");
}

TEST(MetricsTest, FormatsValuesAsGoParsesThem) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(1e20), "1e+20");
}

TEST(MetricsTest, WriterRendersFamiliesInTheTextFormat) {
  ExpositionWriter w;
  w.Family("tessera_chips", "Chips by generation.", MetricType::kGauge);
  w.Sample("tessera_chips", {{"generation", "v6e"}}, 32);
  w.Sample("tessera_chips", {{"generation", "7x"}}, 64);
  w.Family("tessera_up", "Always 1.", MetricType::kGauge);
  w.Sample("tessera_up", {}, 1);
  auto text = w.Finish();
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(*text,
            "# HELP tessera_chips Chips by generation.\n"
            "# TYPE tessera_chips gauge\n"
            "tessera_chips{generation=\"v6e\"} 32\n"
            "tessera_chips{generation=\"7x\"} 64\n"
            "# HELP tessera_up Always 1.\n"
            "# TYPE tessera_up gauge\n"
            "tessera_up 1\n");
}

TEST(MetricsTest, WriterRefusesMisuse) {
  {
    ExpositionWriter w;
    w.Family("a", "", MetricType::kGauge);
    w.Sample("a", {{"x", "1"}}, 1);
    w.Sample("a", {{"x", "1"}}, 2);
    EXPECT_FALSE(w.Finish().ok()) << "duplicate series";
  }
  {
    ExpositionWriter w;
    w.Family("a", "", MetricType::kGauge);
    w.Sample("b", {}, 1);
    EXPECT_FALSE(w.Finish().ok()) << "sample outside its family";
  }
  {
    ExpositionWriter w;
    w.Family("a", "", MetricType::kGauge);
    w.Family("a", "", MetricType::kGauge);
    EXPECT_FALSE(w.Finish().ok()) << "family twice";
  }
  {
    ExpositionWriter w;
    w.Family("bad-name", "", MetricType::kGauge);
    EXPECT_FALSE(w.Finish().ok());
  }
  {
    ExpositionWriter w;
    w.Family("h", "", MetricType::kHistogram);
    w.Sample("h_bucket", {}, 1);
    EXPECT_FALSE(w.Finish().ok()) << "bucket without le";
  }
  {
    ExpositionWriter w;
    w.Family("g", "", MetricType::kGauge);
    w.Sample("g", {{"__name__", "x"}}, 1);
    EXPECT_FALSE(w.Finish().ok()) << "reserved label";
  }
}

TEST(MetricsTest, CounterAddsPerLabelSet) {
  CounterFamily c("tessera_events_total", "Events.", {"reason"});
  c.Add({"Placed"});
  c.Add({"Placed"}, 2);
  c.Add({"Failed"});
  c.Add({"Failed"}, -5);      // ignored: counters only go up
  c.Add({"too", "many"}, 1);  // ignored: wrong arity
  EXPECT_EQ(c.Value({"Placed"}), 3);
  EXPECT_EQ(c.Value({"Failed"}), 1);
  ExpositionWriter w;
  c.Write(w);
  auto text = w.Finish();
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "# HELP tessera_events_total Events.\n"
            "# TYPE tessera_events_total counter\n"
            "tessera_events_total{reason=\"Failed\"} 1\n"
            "tessera_events_total{reason=\"Placed\"} 3\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInclusiveBounds) {
  HistogramFamily h("lat_seconds", "Latency.", {}, {1, 0.5, 2, 1});  // sorted, deduplicated
  EXPECT_EQ(h.upper_bounds(), (std::vector<double>{0.5, 1, 2}));
  for (double v : {0.1, 0.5, 0.7, 1.0, 3.0}) h.Observe({}, v);
  h.Observe({}, std::nan(""));  // ignored
  auto s = h.Read({});
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 4, 4, 5}));
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 5.3);
  ExpositionWriter w;
  h.Write(w);
  auto text = w.Finish();
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.5\"} 2\n"
            "lat_seconds_bucket{le=\"1\"} 4\n"
            "lat_seconds_bucket{le=\"2\"} 4\n"
            "lat_seconds_bucket{le=\"+Inf\"} 5\n"
            "lat_seconds_sum 5.3\n"
            "lat_seconds_count 5\n");
}

TEST(MetricsTest, EmptyUnlabelledFamiliesStillExpose) {
  HistogramFamily h("h", "H.", {}, {1});
  CounterFamily c("c_total", "C.", {});
  ExpositionWriter w;
  h.Write(w);
  c.Write(w);
  auto text = w.Finish();
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("h_bucket{le=\"+Inf\"} 0\n"), std::string::npos);
  EXPECT_NE(text->find("h_count 0\n"), std::string::npos);
  EXPECT_NE(text->find("c_total 0\n"), std::string::npos);
}

TEST(MetricsTest, ConcurrentObservationsAreAllCounted) {
  HistogramFamily h("h", "H.", {"q"}, {1, 10});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 1000; ++i) h.Observe({t % 2 ? "a" : "b"}, i % 20);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.Read({"a"}).count + h.Read({"b"}).count, 4000u);
  EXPECT_EQ(h.Read({"a"}).cumulative.back(), 2000u);
}

}  // namespace
}  // namespace tessera::metrics
