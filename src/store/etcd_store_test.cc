// EtcdStore beyond the typed suite (store_test.cc): endpoints, encoding, schema versions, an
// etcd that is down, two heads on one prefix, the leader fence, and commits whose answer is
// lost (through a TCP relay that drops what a test tells it to). Against a real etcd.
#include "store/etcd_store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pki/pki.h"
#include "store/etcd_client.h"
#include "store/etcd_test_util.h"
#include "store/memory_store.h"

namespace tessera::store {
namespace {

using nlohmann::json;

// A port nothing listens on: bound by the kernel, then released.
uint16_t DeadPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(EtcdEndpoints, ParsesListsAndRefusesBadOnesNamingTheField) {
  auto one = ParseEtcdEndpoints("etcd://127.0.0.1:2379");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(*one, (std::vector<EtcdEndpoint>{{"127.0.0.1", 2379}}));
  auto three = ParseEtcdEndpoints("a:1,b:2,c:3");
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->size(), 3u);
  EXPECT_EQ((*three)[2].ToString(), "c:3");
  for (const char* bad :
       {"etcd://", "", "host", "host:", ":80", "h:0", "h:70000", "h:x", "a:1,,b:2", "a:1,a:1"}) {
    SCOPED_TRACE(bad);
    auto parsed = ParseEtcdEndpoints(bad, "--store");
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("--store"), std::string::npos)
        << parsed.status().message();
  }
}

TEST(EtcdEndpoints, EtcdsMeansTls) {
  EXPECT_TRUE(EtcdUrlUsesTls("etcds://127.0.0.1:2379"));
  EXPECT_FALSE(EtcdUrlUsesTls("etcd://127.0.0.1:2379"));
  auto endpoints = ParseEtcdEndpoints("etcds://a:1,b:2");
  ASSERT_TRUE(endpoints.ok()) << endpoints.status().message();
  EXPECT_EQ(*endpoints, (std::vector<EtcdEndpoint>{{"a", 1}, {"b", 2}}));
}

// etcd as `tessera up --ha` runs it: TLS, and a client certificate of the cluster CA asked for.
TEST(EtcdTls, AClientCertificateOfTheClusterCaIsNeededAndEnough) {
  if (FindEtcdBinary().empty()) GTEST_SKIP() << "*** no etcd binary: skipping the TLS case ***";
  ScopedTempDir dir;
  auto ca = pki::MakeCa({});
  auto stranger_ca = pki::MakeCa({});
  ASSERT_TRUE(ca.ok() && stranger_ca.ok());
  pki::ServerCertOptions member_options;
  member_options.ip_addresses = {"127.0.0.1"};
  member_options.also_client_auth = true;  // etcd's gateway presents it to its own port
  auto member = pki::MakeServerCert(*ca, member_options);
  auto head = pki::MakeClientCert(*ca, {"head:test", "etcd-client"});
  auto stranger = pki::MakeClientCert(*stranger_ca, {"head:test", "etcd-client"});
  ASSERT_TRUE(member.ok() && head.ok() && stranger.ok());
  auto write = [&](const std::string& name, const pki::CertAndKey& pair) {
    EXPECT_TRUE(pki::WriteFile(dir.File(name + ".crt"), pair.cert_pem).ok());
    EXPECT_TRUE(pki::WriteKeyFile(dir.File(name + ".key"), pair.key_pem).ok());
  };
  write("ca", *ca);
  write("member", *member);
  write("head", *head);
  write("stranger", *stranger);
  write("stranger-ca", *stranger_ca);
  const EtcdTls with_cert{dir.File("ca.crt"), dir.File("head.crt"), dir.File("head.key")};
  EtcdProcess etcd;
  etcd.UseTls(dir.File("member.crt"), dir.File("member.key"), dir.File("ca.crt"), with_cert);
  ASSERT_TRUE(etcd.Start()) << etcd.error();

  auto range = [&](std::optional<EtcdTls> tls) {
    EtcdOptions options;
    options.endpoints = {etcd.endpoint()};
    options.tls = std::move(tls);
    EtcdClient client(options);
    return client.Range("k").status();
  };
  EXPECT_TRUE(range(with_cert).ok()) << range(with_cert).message();
  EXPECT_EQ(range(std::nullopt).code(), StatusCode::kUnavailable);  // plain HTTP
  EXPECT_EQ(range(EtcdTls{dir.File("ca.crt"), "", ""}).code(), StatusCode::kUnavailable);
  EXPECT_EQ(
      range(EtcdTls{dir.File("ca.crt"), dir.File("stranger.crt"), dir.File("stranger.key")}).code(),
      StatusCode::kUnavailable);
  // Members another CA vouches for: the client refuses them.
  EXPECT_EQ(range(EtcdTls{dir.File("stranger-ca.crt"), dir.File("head.crt"), dir.File("head.key")})
                .code(),
            StatusCode::kUnavailable);
  // A file that does not load is the caller's mistake, said at once and not retried.
  const Status missing =
      range(EtcdTls{dir.File("ca.crt"), dir.File("none.crt"), dir.File("none.key")});
  EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("none.crt"), std::string::npos) << missing.message();
}

TEST(EtcdEncoding, Base64RoundTripsEveryByteAndRefusesJunk) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += (n < 8 ? 1 : 37)) {
    const std::string bytes = all.substr(0, n);
    auto back = Base64Decode(Base64Encode(bytes));
    ASSERT_TRUE(back.has_value()) << n;
    EXPECT_EQ(*back, bytes) << n;
  }
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_FALSE(Base64Decode("Zm9").has_value());
  EXPECT_FALSE(Base64Decode("Zm=v").has_value());
  EXPECT_FALSE(Base64Decode("Z!9v").has_value());
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
}

// A TCP relay in front of etcd that passes everything until told to lose something: the next
// writing txn before etcd sees it, or etcd's answer to it (applied, but the client never
// hears), and optionally every byte after that (etcd unreachable). A request is taken to be
// one read() here, as the client sends it in one write.
class LossyRelay {
 public:
  enum class Mode { kPass, kDropNextTxn, kLoseNextTxnAnswer, kLoseNextTxnAnswerThenDown, kDown };

  explicit LossyRelay(EtcdEndpoint upstream) : upstream_(std::move(upstream)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listen_fd_, 16), 0);
    EXPECT_EQ(::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~LossyRelay() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    ::close(listen_fd_);
    {
      std::lock_guard lock(mu_);
      for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : pumps_) t.join();
  }
  EtcdEndpoint endpoint() const { return {"127.0.0.1", port_}; }
  void set_mode(Mode m) { mode_ = m; }
  Mode mode() const { return mode_; }

 private:
  void Accept() {
    while (!stopping_) {
      const int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      std::lock_guard lock(mu_);
      pumps_.emplace_back([this, client] { Pump(client); });
    }
  }
  int Connect() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(upstream_.port);
    ::inet_pton(AF_INET, upstream_.host.c_str(), &addr.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  void Pump(int client) {
    const int server = Connect();
    {
      std::lock_guard lock(mu_);
      open_fds_.push_back(client);
      if (server >= 0) open_fds_.push_back(server);
    }
    bool losing_answer = false;  // the txn went up; its answer must not come back
    char buf[16384];
    while (server >= 0 && !stopping_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(fds, 2, 200) < 0) break;
      if (fds[0].revents) {
        const ssize_t n = ::read(client, buf, sizeof buf);
        if (n <= 0 || mode_ == Mode::kDown) break;
        // A writing txn (the store's snapshot reads are txns too, with ranges only).
        const bool txn = std::string_view(buf, n).find("request_put") != std::string_view::npos;
        if (txn && mode_ == Mode::kDropNextTxn) {
          mode_ = Mode::kPass;
          break;  // etcd never sees it
        }
        if (txn &&
            (mode_ == Mode::kLoseNextTxnAnswer || mode_ == Mode::kLoseNextTxnAnswerThenDown)) {
          losing_answer = true;
        }
        if (::write(server, buf, n) != n) break;
      }
      if (fds[1].revents) {
        const ssize_t n = ::read(server, buf, sizeof buf);
        if (n <= 0) break;
        if (losing_answer) {
          mode_ = mode_ == Mode::kLoseNextTxnAnswerThenDown ? Mode::kDown : Mode::kPass;
          break;  // applied by etcd; the client only sees the connection close
        }
        if (::write(client, buf, n) != n) break;
      }
    }
    std::lock_guard lock(mu_);
    std::erase(open_fds_, client);
    std::erase(open_fds_, server);
    ::close(client);
    if (server >= 0) ::close(server);
  }

  EtcdEndpoint upstream_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<Mode> mode_{Mode::kPass};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> pumps_;  // guarded by mu_
  std::vector<int> open_fds_;       // guarded by mu_
};

class EtcdStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    etcd_ = SharedEtcd::Get();
    if (etcd_ == nullptr) GTEST_SKIP() << "etcd is not installed here (see stderr)";
    prefix_ = SharedEtcd::UniquePrefix("etcd");
  }
  EtcdStoreOptions StoreOptions() const {
    EtcdStoreOptions o;
    o.etcd.endpoints = {etcd_->endpoint()};
    o.prefix = prefix_;
    return o;
  }
  std::unique_ptr<EtcdStore> OpenOrDie() { return OpenWith(StoreOptions()); }
  // Through these endpoints instead (a relay), with per-call timeouts when given.
  std::unique_ptr<EtcdStore> OpenOrDie(std::vector<EtcdEndpoint> endpoints,
                                       std::chrono::milliseconds timeout = {}) {
    EtcdStoreOptions o = StoreOptions();
    o.etcd.endpoints = std::move(endpoints);
    if (timeout.count() > 0) o.etcd.connect_timeout = o.etcd.request_timeout = timeout;
    return OpenWith(o);
  }
  std::unique_ptr<EtcdStore> OpenWith(const EtcdStoreOptions& o) {
    auto opened = EtcdStore::Open(o);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return opened.ok() ? std::move(opened).value() : nullptr;
  }

  EtcdProcess* etcd_ = nullptr;
  std::string prefix_;
};

TEST_F(EtcdStoreTest, BodiesAndKindsAreStoredByteForByte) {
  auto s = OpenOrDie();
  ASSERT_NE(s, nullptr);
  const std::string body("line1\nline2\0:7:x\xff\xfe", 19);
  ASSERT_TRUE(s->Create("a/b%c", "n/1", body).ok());
  ASSERT_TRUE(s->Create("a", "b%c", "other").ok());  // must not collide with kind "a/b%c"
  auto got = s->Get("a/b%c", "n/1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->body, body);
  auto listed = s->List("a/b%c");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "n/1");
  EXPECT_EQ(s->List("a")->size(), 1u);
  auto changes = s->ChangesSince(0, 10);
  ASSERT_TRUE(changes.ok()) << changes.status().ToString();
  ASSERT_EQ(changes->size(), 2u);
  EXPECT_EQ((*changes)[0].body, body);
  EXPECT_EQ((*changes)[0].kind, "a/b%c");
}

TEST_F(EtcdStoreTest, NewerSchemaIsRefusedAndAForeignPrefixToo) {
  EtcdClient client(StoreOptions().etcd);
  auto put = client.Call("/v3/kv/put",
                         {{"key", Base64Encode(prefix_ + "schema")}, {"value", Base64Encode("2")}});
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  auto newer = EtcdStore::Open(StoreOptions());
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("schema version 2"), std::string::npos)
      << newer.status().message();
  EXPECT_NE(newer.status().message().find("newer tessera"), std::string::npos);

  ASSERT_TRUE(client
                  .Call("/v3/kv/put", {{"key", Base64Encode(prefix_ + "schema")},
                                       {"value", Base64Encode("not a number")}})
                  .ok());
  auto foreign = EtcdStore::Open(StoreOptions());
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.status().message().find("belongs to something else"), std::string::npos)
      << foreign.status().message();
}

TEST(EtcdStoreDown, AnEndpointThatIsDownIsRetriedWithBackoffThenAClearError) {
  EtcdStoreOptions o;
  const uint16_t port = DeadPort();
  o.etcd.endpoints = {{"127.0.0.1", port}};
  o.open_timeout = std::chrono::milliseconds(700);
  std::vector<int64_t> waits;
  o.on_open_retry = [&](const Status& error, std::chrono::milliseconds wait) {
    EXPECT_EQ(error.code(), StatusCode::kUnavailable);
    waits.push_back(wait.count());
  };
  auto opened = EtcdStore::Open(o);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kUnavailable);
  const std::string& m = opened.status().message();
  EXPECT_NE(m.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << m;
  EXPECT_NE(m.find("gave up after 700 ms"), std::string::npos) << m;
  ASSERT_GE(waits.size(), 2u);
  EXPECT_EQ(waits[0], 100);
  EXPECT_EQ(waits[1], 200);  // doubling

  EtcdStoreOptions bad = o;
  bad.prefix = "tessera";
  auto bad_prefix = EtcdStore::Open(bad);
  EXPECT_EQ(bad_prefix.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EtcdStoreTest, ADeadEndpointInTheListIsSkipped) {
  EtcdStoreOptions o = StoreOptions();
  o.etcd.endpoints = {{"127.0.0.1", DeadPort()}, etcd_->endpoint()};
  auto opened = EtcdStore::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_TRUE((*opened)->Create("Host", "h", "x").ok());
}

TEST_F(EtcdStoreTest, TwoHeadsOnOnePrefixShareStateAndLoseNoUpdate) {
  auto a = OpenOrDie();
  auto b = OpenOrDie();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Create("Counter", "c", "0").ok());
  EXPECT_EQ(b->Revision(), 1);
  EXPECT_EQ(b->Get("Counter", "c")->body, "0");
  std::atomic<int> errors{0};
  auto bump = [&](EtcdStore* s) {
    for (int i = 0; i < 20; ++i) {
      for (;;) {
        auto current = s->Get("Counter", "c");
        if (!current.ok()) return ++errors, void();
        auto done = s->Update("Counter", "c", std::to_string(std::stoi(current->body) + 1),
                              current->resource_version);
        if (done.ok()) break;
        if (done.status().code() != StatusCode::kConflict) return ++errors, void();
      }
    }
  };
  std::thread ta(bump, a.get()), tb(bump, b.get());
  ta.join();
  tb.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(a->Get("Counter", "c")->body, "40");
  EXPECT_EQ(a->Revision(), 41);
  EXPECT_EQ(b->ChangesSince(0, 100)->size(), 41u);
}

TEST_F(EtcdStoreTest, ADeposedLeadersWriteIsRefusedWhateverItsClock) {
  auto old_leader = OpenOrDie();
  auto new_leader = OpenOrDie();
  ASSERT_TRUE(old_leader && new_leader);
  EtcdClient& client = old_leader->client();
  const std::string key = prefix_ + "leader";
  auto put = [&](const std::string& who) -> int64_t {
    auto answer = client.Call("/v3/kv/txn", {{"success", json::array({etcd::Put(key, who)})}});
    EXPECT_TRUE(answer.ok()) << answer.status().ToString();
    return answer.ok() ? etcd::Int((*answer)["header"], "revision") : 0;
  };
  const int64_t term1 = put("old");
  old_leader->SetFence(key, term1);
  ASSERT_TRUE(old_leader->Create("TrainJob", "a", "1").ok());

  // The key is deleted (the lease ran out) and another head wins: a new term.
  auto deleted = client.Call("/v3/kv/deleterange", {{"key", Base64Encode(key)}});
  ASSERT_TRUE(deleted.ok());
  const int64_t term2 = put("new");
  ASSERT_GT(term2, term1);
  new_leader->SetFence(key, term2);

  auto stale = old_leader->Create("TrainJob", "b", "zombie");
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(stale.status().message().find("fenced"), std::string::npos) << stale.status().message();
  EXPECT_NE(stale.status().message().find("term " + std::to_string(term1)), std::string::npos);
  EXPECT_EQ(new_leader->Get("TrainJob", "b").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(new_leader->Revision(), 1);

  ASSERT_TRUE(new_leader->Create("TrainJob", "b", "real").ok());
  EXPECT_EQ(new_leader->Revision(), 2);
  // A deposed head whose stale view fails a precondition (here: creating what the new leader
  // created) is told it is fenced, not "already exists": the API would answer that 409 and its
  // client would take the write as done (the chaos benchmark's "acknowledged job lost").
  auto stale_create = old_leader->Create("TrainJob", "b", "zombie");
  EXPECT_EQ(stale_create.status().code(), StatusCode::kUnavailable)
      << stale_create.status().ToString();
  EXPECT_NE(stale_create.status().message().find("fenced"), std::string::npos)
      << stale_create.status().ToString();
  // With no leader key at all, a fenced head cannot write either.
  ASSERT_TRUE(client.Call("/v3/kv/deleterange", {{"key", Base64Encode(key)}}).ok());
  auto orphan = new_leader->Create("TrainJob", "c", "x");
  EXPECT_NE(orphan.status().message().find("is gone"), std::string::npos)
      << orphan.status().ToString();
}

TEST_F(EtcdStoreTest, ACommitWhoseAnswerIsLostIsSettledAsApplied) {
  LossyRelay relay(etcd_->endpoint());
  auto store = OpenOrDie({relay.endpoint()});
  ASSERT_NE(store, nullptr);
  EtcdStore& s = *store;

  relay.set_mode(LossyRelay::Mode::kLoseNextTxnAnswer);
  auto created = s.Create("TrainJob", "a", "1");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(relay.mode(), LossyRelay::Mode::kPass) << "the relay never lost an answer";
  EXPECT_EQ(s.Revision(), 1);
  EXPECT_EQ(s.Get("TrainJob", "a")->body, "1");
  EXPECT_FALSE(s.outcome_unknown());
  // The store's view and etcd's agree: the next commit needs no retry and makes revision 2.
  ASSERT_TRUE(s.Create("TrainJob", "b", "2").ok());
  EXPECT_EQ(s.Revision(), 2);
  EXPECT_EQ(s.ChangesSince(0, 10)->size(), 2u);
}

TEST_F(EtcdStoreTest, ATxnSentAgainToTheNextEndpointAfterALostAnswerIsNotAConflict) {
  // The client sends the txn again to the next endpoint when the first drops the connection;
  // that try fails the compare on the store's own write, which is a success, not "exists".
  LossyRelay relay(etcd_->endpoint());
  auto store = OpenOrDie({relay.endpoint(), etcd_->endpoint()});
  ASSERT_NE(store, nullptr);
  relay.set_mode(LossyRelay::Mode::kLoseNextTxnAnswer);
  auto created = store->Create("Event", "evt-0000000001", "x");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(relay.mode(), LossyRelay::Mode::kPass) << "the relay never lost an answer";
  EXPECT_EQ(store->Revision(), 1);
}

TEST_F(EtcdStoreTest, ATxnLostBeforeEtcdSawItFailsAndCanNeverApplyLater) {
  LossyRelay relay(etcd_->endpoint());
  auto store = OpenOrDie({relay.endpoint()});
  ASSERT_NE(store, nullptr);
  EtcdStore& s = *store;
  relay.set_mode(LossyRelay::Mode::kDropNextTxn);
  auto lost = s.Create("TrainJob", "a", "1");
  EXPECT_EQ(lost.status().code(), StatusCode::kUnavailable) << lost.status().ToString();
  EXPECT_FALSE(s.outcome_unknown());
  EXPECT_EQ(s.Get("TrainJob", "a").status().code(), StatusCode::kNotFound);
  auto again = s.Create("TrainJob", "a", "2");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(s.Revision(), 1);
  EXPECT_EQ(s.Get("TrainJob", "a")->body, "2");
}

TEST_F(EtcdStoreTest, AnOutcomeEtcdCannotTellStopsTheStoreFromWriting) {
  LossyRelay relay(etcd_->endpoint());
  // The lost answer costs one request timeout: short enough to keep the test quick, long
  // enough for Open's own calls under ThreadSanitizer on a loaded machine (200 ms was not).
  auto store = OpenOrDie({relay.endpoint()}, std::chrono::milliseconds(2000));
  ASSERT_NE(store, nullptr);
  EtcdStore& s = *store;
  relay.set_mode(LossyRelay::Mode::kLoseNextTxnAnswerThenDown);
  auto unknown = s.Create("TrainJob", "a", "1");
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(unknown.status().message().find("still unknown"), std::string::npos)
      << unknown.status().ToString();
  EXPECT_TRUE(s.outcome_unknown());
  relay.set_mode(LossyRelay::Mode::kPass);
  auto refused = s.Create("TrainJob", "b", "2");
  EXPECT_NE(refused.status().message().find("restart the head"), std::string::npos)
      << refused.status().ToString();
  // It was in fact applied: a restarted head (a new store) reads it.
  auto reopened = EtcdStore::Open(StoreOptions());
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->Get("TrainJob", "a")->body, "1");
}

// A warm standby's copy (EtcdStore::Follow): every Get and List answers what a store reading
// etcd answers, for every kind and name written, after each Follow.
void ExpectSameAnswers(EtcdStore& following, EtcdStore& fresh,
                       const std::vector<std::string>& kinds,
                       const std::vector<std::string>& names) {
  for (const std::string& kind : kinds) {
    SCOPED_TRACE("kind " + kind);
    auto want = fresh.List(kind);
    auto got = following.List(kind);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(*got, *want);
    // Visit: the copy's own objects (following) and a read of etcd (fresh), as List.
    for (EtcdStore* store : {&following, &fresh}) {
      std::vector<Object> visited;
      ASSERT_TRUE(store->Visit(kind, [&](const Object& o) { visited.push_back(o); }).ok());
      EXPECT_EQ(visited, *want);
    }
    for (const std::string& name : names) {
      auto w = fresh.Get(kind, name);
      auto g = following.Get(kind, name);
      ASSERT_EQ(g.ok(), w.ok()) << name;
      if (w.ok()) {
        EXPECT_EQ(*g, *w);
      } else {
        EXPECT_EQ(g.status().code(), StatusCode::kNotFound) << name;
      }
    }
  }
}

TEST_F(EtcdStoreTest, AFollowingStandbyAnswersAsEtcdDoesAndStopsAtItsFirstWrite) {
  auto writer = OpenOrDie();
  auto standby = OpenOrDie();
  auto fresh = OpenOrDie();
  ASSERT_TRUE(writer && standby && fresh);
  EXPECT_EQ(standby->following_revision(), std::nullopt);
  ASSERT_TRUE(writer->Create("Host", "h1", "1").ok());
  ASSERT_TRUE(writer->Create("Host", "h2", "2").ok());
  ASSERT_TRUE(writer->Create("a/b%c", "n/1", std::string("x\n\0y", 4)).ok());
  auto first = standby->Follow();  // everything, in one snapshot
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(standby->following_revision(), writer->Revision());
  const std::vector<std::string> kinds = {"Host", "a/b%c", "TrainJob", "Never"};
  const std::vector<std::string> names = {"h1", "h2", "n/1", "j1", "nobody"};
  ExpectSameAnswers(*standby, *fresh, kinds, names);

  store::WriteBatch batch;
  batch.Update("Host", "h1", "1b", writer->Get("Host", "h1")->resource_version)
      .Delete("Host", "h2")
      .Create("TrainJob", "j1", "job");
  ASSERT_TRUE(writer->Commit(batch).ok());
  // Until it follows again the standby answers from its copy as of the last Follow.
  EXPECT_EQ(standby->Get("TrainJob", "j1").status().code(), StatusCode::kNotFound);
  auto second = standby->Follow();  // only the change log since
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(*second, 3);
  ExpectSameAnswers(*standby, *fresh, kinds, names);

  // Its own first write ends the copy: from then on it reads etcd, and cannot follow again.
  ASSERT_TRUE(standby->Create("Host", "h3", "3").ok());
  EXPECT_EQ(standby->following_revision(), std::nullopt);
  ASSERT_TRUE(writer->Create("TrainJob", "j2", "job2").ok());
  EXPECT_EQ(standby->Get("TrainJob", "j2")->body, "job2");
  EXPECT_EQ(standby->Follow().status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(EtcdStoreTest, ListsAndAStandbysFirstCopyLongerThanAPageAreWhole) {
  EtcdStoreOptions paged = StoreOptions();
  paged.page_size = 2;  // five objects of a kind: three pages
  auto writer = OpenWith(paged);
  auto standby = OpenWith(paged);
  auto fresh = OpenOrDie();
  ASSERT_TRUE(writer && standby && fresh);
  std::vector<std::string> names;
  for (int i = 0; i < 5; ++i) {
    names.push_back("j" + std::to_string(i));
    ASSERT_TRUE(writer->Create("TrainJob", names.back(), "body" + std::to_string(i)).ok());
  }
  ASSERT_TRUE(writer->Create("Host", "h1", "1").ok());
  auto listed = writer->List("TrainJob");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ((*listed)[i].name, names[i]);
    EXPECT_EQ((*listed)[i].body, "body" + std::to_string(i));
  }
  auto first = standby->Follow();  // the snapshot: six objects in pages of two
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(standby->following_revision(), writer->Revision());
  names.push_back("h1");
  ExpectSameAnswers(*standby, *fresh, {"TrainJob", "Host"}, names);
}

TEST_F(EtcdStoreTest, AFollowerBehindTheCompactedLogReadsEverythingAgain) {
  Options small;
  small.change_log_limit = 3;
  auto opened = EtcdStore::Open(StoreOptions(), small);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto writer = std::move(opened).value();
  auto standby = OpenOrDie();
  auto fresh = OpenOrDie();
  ASSERT_TRUE(writer->Create("Host", "h0", "0").ok());
  ASSERT_TRUE(standby->Follow().ok());
  for (int i = 1; i <= 8; ++i)
    ASSERT_TRUE(writer->Create("Host", "h" + std::to_string(i), std::to_string(i)).ok());
  ASSERT_TRUE(writer->Delete("Host", "h0").ok());
  auto followed = standby->Follow();
  ASSERT_TRUE(followed.ok()) << followed.status().ToString();
  EXPECT_EQ(*followed, 0);  // read again, not replayed: the log no longer reaches back
  EXPECT_EQ(standby->following_revision(), writer->Revision());
  ExpectSameAnswers(*standby, *fresh, {"Host"}, {"h0", "h1", "h8"});
}

// etcd's history is compacted one call behind: the first call notes etcd's revision, the next
// compacts up to it. The versions an update replaced before that revision are gone from etcd
// (a read pinned below it is refused), the store reads as before, and a call that finds etcd
// compacted further already (another head) is not an error.
TEST_F(EtcdStoreTest, HistoryIsCompactedUpToTheRevisionTheCallBeforeNoted) {
  auto s = OpenOrDie();
  auto standby = OpenOrDie();
  ASSERT_TRUE(s && standby);
  auto created = s->Create("TrainJob", "j", "step 0");
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  int64_t version = created->resource_version;
  auto step = [&](int i) {
    auto updated = s->Update("TrainJob", "j", "step " + std::to_string(i), version);
    ASSERT_TRUE(updated.ok()) << updated.status().ToString();
    version = updated->resource_version;
  };
  for (int i = 1; i <= 3; ++i) step(i);
  const std::string key = s->prefix() + "o/TrainJob/j";
  auto before = s->client().Range(key);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ(before->kvs.size(), 1u);
  const int64_t old_version = before->kvs[0].mod_revision;  // "step 3"

  auto first = s->CompactHistory();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, 0);  // nothing noted before: nothing compacted
  auto pinned = s->client().Range(key, {}, 0, old_version);
  ASSERT_TRUE(pinned.ok()) << "one interval of history stays: " << pinned.status().ToString();
  EXPECT_NE(pinned->kvs.at(0).value.find("step 3"), std::string::npos);

  for (int i = 4; i <= 6; ++i) step(i);
  auto second = s->CompactHistory();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_GE(*second, old_version);  // the revision the first call noted, with "step 3"
  // Compacted up to R, etcd answers at R and later only: "step 2" and before are gone.
  auto gone = s->client().Range(key, {}, 0, old_version - 1);
  ASSERT_FALSE(gone.ok()) << "etcd still holds revision " << old_version - 1;
  EXPECT_NE(gone.status().message().find("compacted"), std::string::npos)
      << gone.status().ToString();
  auto at_second = s->client().Range(key, {}, 0, *second);
  ASSERT_TRUE(at_second.ok()) << at_second.status().ToString();

  // The store reads as before: the object, its version and the change log.
  auto got = s->Get("TrainJob", "j");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->body, "step 6");
  EXPECT_EQ(got->resource_version, version);
  auto changes = s->ChangesSince(0, 100);
  ASSERT_TRUE(changes.ok()) << changes.status().ToString();
  ASSERT_FALSE(changes->empty());
  EXPECT_EQ(changes->back().body, "step 6");
  auto followed = standby->Follow();
  ASSERT_TRUE(followed.ok()) << followed.status().ToString();
  EXPECT_EQ(standby->following_revision(), s->Revision());

  // Another head's compactor, noting an older revision than etcd has compacted to: not an
  // error, and it compacts from its own next note on.
  auto other = standby->CompactHistory();
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(*other, 0);
  step(7);
  ASSERT_TRUE(s->CompactHistory().ok());
  auto behind = standby->CompactHistory();  // up to what it noted: etcd is there already
  ASSERT_TRUE(behind.ok()) << behind.status().ToString();
  ASSERT_TRUE(s->Close().ok());
  auto closed = s->CompactHistory();
  EXPECT_EQ(closed.status().code(), StatusCode::kFailedPrecondition);
}

// The change log is compacted as the memory store compacts it (whole revisions, at most the
// limit's entries), whatever the mix of batch sizes: a few old revisions of many entries or many
// of one, read a page at a time. After every commit each revision's changes are the same.
TEST_F(EtcdStoreTest, TheChangeLogIsCompactedAsTheMemoryStoreCompactsItForAnyMixOfBatches) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    prefix_ = SharedEtcd::UniquePrefix("logmix");
    Options small;
    small.change_log_limit = 24;
    auto opened = EtcdStore::Open(StoreOptions(), small);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    auto etcd = std::move(opened).value();
    auto memory = MemoryStore::Open(small);
    ASSERT_TRUE(memory.ok()) << memory.status().ToString();
    std::mt19937 rng(seed);
    for (int step = 0; step < 80; ++step) {
      // Mostly single writes, now and then a flush of up to 20: the head's mix.
      const int size = rng() % 4 == 0 ? 1 + static_cast<int>(rng() % 20) : 1;
      WriteBatch b;
      for (int i = 0; i < size; ++i)
        b.Put("TrainJob", "j" + std::to_string((step * 7 + i) % 40), std::to_string(step));
      auto e = etcd->Commit(b);
      auto m = (*memory)->Commit(b);
      ASSERT_TRUE(e.ok() && m.ok()) << e.status().ToString() << " / " << m.status().ToString();
      ASSERT_EQ(*e, *m);
      // The oldest resume point, the newest and one between; every one at the end.
      const std::vector<int64_t> froms =
          step + 1 < 80 ? std::vector<int64_t>{0, *e - 1, static_cast<int64_t>(rng() % *e)} : [&] {
            std::vector<int64_t> all;
            for (int64_t r = 0; r <= *e; ++r) all.push_back(r);
            return all;
          }();
      for (int64_t from : froms) {
        // Everything since, or a few changes (whole revisions: read in pages, ChangesSince).
        const size_t limit = rng() % 2 == 0 ? 1000 : 1 + rng() % 30;
        auto ec = etcd->ChangesSince(from, limit);
        auto mc = (*memory)->ChangesSince(from, limit);
        ASSERT_EQ(ec.ok(), mc.ok()) << "step " << step << ", since " << from << ": "
                                    << ec.status().ToString() << " / " << mc.status().ToString();
        if (ec.ok()) {
          ASSERT_EQ(*ec, *mc) << "step " << step << ", since " << from << ", limit " << limit;
        }
      }
    }
  }
}

// A standby behind by a log of flushes (a commit of many documents each) reads it in pages
// that fit the client's answer limit. With every wanted revision read at once (1,000 for a
// limit of 1,000 changes: here all 50, about 3.3 MiB in etcd's answer) the answer was over the
// limit, and the standby could not follow at all.
TEST_F(EtcdStoreTest, AStandbyBehindByALogOfFlushesFollowsWithinTheAnswerLimit) {
  EtcdStoreOptions capped = StoreOptions();
  capped.etcd.max_response_bytes = 2 << 20;
  auto writer = OpenOrDie();
  auto standby = OpenWith(capped);
  auto fresh = OpenOrDie();
  ASSERT_TRUE(writer && standby && fresh);
  ASSERT_TRUE(standby->Follow().ok());  // its first copy: empty
  const int kFlushes = 50, kPerFlush = 50;
  std::vector<std::string> names;
  for (int f = 0; f < kFlushes; ++f) {
    WriteBatch flush;
    for (int i = 0; i < kPerFlush; ++i) {
      const std::string name = "j" + std::to_string(f * kPerFlush + i);
      flush.Put("TrainJob", name, std::string(1024, static_cast<char>('a' + f % 26)));
      if (i == 0) names.push_back(name);
    }
    auto committed = writer->Commit(flush);
    ASSERT_TRUE(committed.ok()) << "flush " << f << ": " << committed.status().ToString();
  }
  // A page of the log at a time: whole revisions, in order, as many as asked for.
  auto changes = standby->ChangesSince(0, 1000);
  ASSERT_TRUE(changes.ok()) << changes.status().ToString();
  ASSERT_EQ(changes->size(), 1000u);
  for (size_t i = 0; i < changes->size(); ++i) {
    EXPECT_EQ((*changes)[i].name, "j" + std::to_string(i)) << i;
    EXPECT_EQ((*changes)[i].revision, (*changes)[0].revision + static_cast<int64_t>(i) / kPerFlush)
        << i;
  }
  auto followed = standby->Follow();
  ASSERT_TRUE(followed.ok()) << followed.status().ToString();
  EXPECT_EQ(*followed, kFlushes * kPerFlush);
  EXPECT_EQ(standby->following_revision(), writer->Revision());
  ExpectSameAnswers(*standby, *fresh, {"TrainJob"}, names);
}

// A commit over a full log whose oldest revisions are flushes and whose mean is about one change
// a revision (1,000 in 525, single writes since; 1 rounded down): a first page of as many
// revisions as entries over the limit, and one more (21 flushes here, about 4.6 MiB in etcd's
// answer), was over the client's answer limit, and the commit failed. It reads them in pages
// that fit, and the log reads as the memory store's.
TEST_F(EtcdStoreTest, ACommitDropsLargeOldRevisionsWithinTheAnswerLimit) {
  EtcdStoreOptions capped = StoreOptions();
  capped.etcd.max_response_bytes = 4 << 20;
  Options small;
  small.change_log_limit = 1000;
  auto opened = EtcdStore::Open(capped, small);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto etcd = std::move(opened).value();
  auto memory = MemoryStore::Open(small);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  auto both = [&](const WriteBatch& b) {
    auto e = etcd->Commit(b);
    auto m = (*memory)->Commit(b);
    ASSERT_TRUE(e.ok() && m.ok()) << e.status().ToString() << " / " << m.status().ToString();
    ASSERT_EQ(*e, *m);
  };
  for (int f = 0; f < 25; ++f) {  // 25 flushes of 20 documents of 8 KiB: 500 entries
    WriteBatch flush;
    for (int i = 0; i < 20; ++i)
      flush.Put("TrainJob", "j" + std::to_string(i), std::string(8192, static_cast<char>('a' + f)));
    ASSERT_NO_FATAL_FAILURE(both(flush));
  }
  for (int i = 0; i < 500; ++i) {  // 500 single writes: the log is full
    WriteBatch one;
    one.Put("Host", "h" + std::to_string(i % 10), std::to_string(i));
    ASSERT_NO_FATAL_FAILURE(both(one));
  }
  WriteBatch flush;  // 20 over the limit: the oldest flush goes
  for (int i = 0; i < 20; ++i) flush.Put("TrainJob", "j" + std::to_string(i), "last");
  ASSERT_NO_FATAL_FAILURE(both(flush));
  const int64_t last = etcd->Revision();
  for (int64_t from : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{25}, last - 1}) {
    auto ec = etcd->ChangesSince(from, 1000);
    auto mc = (*memory)->ChangesSince(from, 1000);
    ASSERT_EQ(ec.ok(), mc.ok()) << "since " << from << ": " << ec.status().ToString() << " / "
                                << mc.status().ToString();
    if (ec.ok()) {
      EXPECT_EQ(*ec, *mc) << "since " << from;
    }
  }
}

TEST_F(EtcdStoreTest, AFollowerMatchesEtcdAfterRandomWritesAndFollows) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    prefix_ = SharedEtcd::UniquePrefix("follow");
    auto writer = OpenOrDie();
    auto standby = OpenOrDie();
    auto fresh = OpenOrDie();
    ASSERT_TRUE(writer && standby && fresh);
    std::mt19937 rng(seed);
    const std::vector<std::string> kinds = {"Host", "TrainJob", "Event"};
    const std::vector<std::string> names = {"a", "b", "c", "d"};
    for (int step = 0; step < 60; ++step) {
      const std::string& kind = kinds[rng() % kinds.size()];
      const std::string& name = names[rng() % names.size()];
      auto current = writer->Get(kind, name);
      Status wrote;
      if (!current.ok()) {
        wrote = writer->Create(kind, name, std::to_string(step)).status();
      } else if (rng() % 3 == 0) {
        wrote = writer->Delete(kind, name);
      } else {
        wrote =
            writer->Update(kind, name, std::to_string(step), current->resource_version).status();
      }
      ASSERT_TRUE(wrote.ok()) << wrote.ToString();
      if (rng() % 5 == 0) {
        auto followed = standby->Follow();
        ASSERT_TRUE(followed.ok()) << followed.status().ToString();
        ExpectSameAnswers(*standby, *fresh, kinds, names);
      }
    }
    ASSERT_TRUE(standby->Follow().ok());
    ExpectSameAnswers(*standby, *fresh, kinds, names);
  }
}

}  // namespace
}  // namespace tessera::store
