#include "api/replica_certs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>

#include "pki/pki.h"

namespace tessera::api {
namespace {

controller::ReplicaCertRequest Leader(int incarnation = 0) {
  return {"chat", 7, "server", 1, incarnation, "node-3", "10.0.0.3"};
}

TEST(ReplicaServerCertOptions, NamesTheLeadersAddressAndHost) {
  pki::ServerCertOptions o = ReplicaServerCertOptions(Leader(), std::chrono::hours(24), 1000);
  EXPECT_EQ(o.ip_addresses, std::vector<std::string>{"10.0.0.3"});
  EXPECT_EQ(o.dns_names, std::vector<std::string>{"node-3.host.tessera"});
  EXPECT_EQ(o.validity.validity, std::chrono::hours(24));
  EXPECT_EQ(o.validity.not_before_unix, 1000);
  EXPECT_FALSE(o.also_client_auth);

  controller::ReplicaCertRequest named = Leader();
  named.address = "node-3.example.com";
  o = ReplicaServerCertOptions(named, std::chrono::hours(1), std::nullopt);
  EXPECT_TRUE(o.ip_addresses.empty());
  EXPECT_EQ(o.dns_names, (std::vector<std::string>{"node-3.example.com", "node-3.host.tessera"}));
  named.address = "::1";
  EXPECT_EQ(ReplicaServerCertOptions(named, std::chrono::hours(1), 0).ip_addresses,
            std::vector<std::string>{"::1"});
}

class ReplicaCertIssuerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("replica_certs_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    auto ca = pki::MakeCa({});
    ASSERT_TRUE(ca.ok()) << ca.status().ToString();
    ca_ = *ca;
    ASSERT_TRUE(pki::WriteFile((dir_ / "ca.crt").string(), ca_.cert_pem).ok());
    ASSERT_TRUE(pki::WriteKeyFile((dir_ / "ca.key").string(), ca_.key_pem).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  ReplicaCertOptions Options(std::chrono::seconds ttl = std::chrono::hours(24)) const {
    return {(dir_ / "ca.crt").string(), (dir_ / "ca.key").string(), ttl};
  }

  std::filesystem::path dir_;
  pki::CertAndKey ca_;
};

TEST_F(ReplicaCertIssuerTest, SignsWithTheClusterCaForTheLeadersAddress) {
  ReplicaCertIssuer issuer(Options());
  ASSERT_TRUE(issuer.Load().ok());
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  auto tls = issuer.Issue(Leader(), now);
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  EXPECT_EQ(tls->ca_pem, ca_.cert_pem);
  EXPECT_TRUE(pki::VerifyCertificate(ca_.cert_pem, tls->cert_pem).ok());
  EXPECT_TRUE(pki::CheckKeyMatchesCert(tls->cert_pem, tls->key_pem).ok());
  auto info = pki::ReadCertificate(tls->cert_pem);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->ip_addresses, std::vector<std::string>{"10.0.0.3"});
  EXPECT_EQ(info->dns_names, std::vector<std::string>{"node-3.host.tessera"});
  EXPECT_EQ(info->not_after_unix - info->not_before_unix, 24 * 3600);
}

TEST_F(ReplicaCertIssuerTest, CachesPerGroupAndRenewsByAge) {
  const int64_t ttl = 1000;
  ReplicaCertIssuer issuer(Options(std::chrono::seconds(ttl)));
  ASSERT_TRUE(issuer.Load().ok());
  const int64_t t0 = static_cast<int64_t>(std::time(nullptr));
  auto first = issuer.Issue(Leader(0), t0);
  ASSERT_TRUE(first.ok());
  // The same incarnation, again and again: the same certificate, made once.
  auto again = issuer.Issue(Leader(0), t0 + 10);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->cert_pem, first->cert_pem);
  EXPECT_EQ(issuer.made(), 1u);
  // Recreated early in its life: taken over.
  auto recreated = issuer.Issue(Leader(1), t0 + 100);
  ASSERT_TRUE(recreated.ok());
  EXPECT_EQ(recreated->cert_pem, first->cert_pem);
  EXPECT_EQ(issuer.made(), 1u);
  // Another replica, host or address: its own.
  controller::ReplicaCertRequest other = Leader(1);
  other.replica = 2;
  auto second = issuer.Issue(other, t0 + 100);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->cert_pem, first->cert_pem);
  EXPECT_EQ(issuer.made(), 2u);
  // Recreated with less than half its life left: a new one.
  auto late = issuer.Issue(Leader(2), t0 + ttl / 2 + 10);
  ASSERT_TRUE(late.ok());
  EXPECT_NE(late->cert_pem, first->cert_pem);
  EXPECT_EQ(issuer.made(), 3u);
  // The same incarnation past 3/4 of its life: renewed.
  auto renewed = issuer.Issue(Leader(2), t0 + ttl / 2 + 10 + ttl * 3 / 4 + 10);
  ASSERT_TRUE(renewed.ok());
  EXPECT_NE(renewed->cert_pem, late->cert_pem);
  EXPECT_EQ(issuer.made(), 4u);
}

TEST_F(ReplicaCertIssuerTest, ACaKeyThatDoesNotMatchIsNamed) {
  auto other = pki::MakeCa({});
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(pki::WriteKeyFile((dir_ / "ca.key").string(), other->key_pem).ok());
  ReplicaCertIssuer issuer(Options());
  Status loaded = issuer.Load();
  EXPECT_EQ(loaded.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.message().find("ca.key"), std::string::npos) << loaded.message();
}

}  // namespace
}  // namespace tessera::api
