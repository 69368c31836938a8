#include "api/host_certs.h"

#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <memory>

#include "pki/pki.h"
#include "store/sqlite_store.h"

namespace tessera::api {
namespace {

TEST(HostIdentity, RoundTripsAndRefusesOtherKinds) {
  EXPECT_EQ(HostIdentity("node-3"), "host:node-3");
  EXPECT_EQ(HostOfIdentity(HostIdentity("node-3")), "node-3");
  EXPECT_EQ(HostOfIdentity("user:alice"), std::nullopt);
  EXPECT_EQ(HostOfIdentity("host:"), std::nullopt);
  EXPECT_EQ(HostOfIdentity(""), std::nullopt);
  EXPECT_EQ(HostOfIdentity("Host:node-3"), std::nullopt);
  EXPECT_EQ(HostDnsName("node-3"), "node-3.host.tessera");
}

TEST(AuthorizeHostCall, OnlyTheHostsOwnCertificateWhileNotRevoked) {
  EXPECT_TRUE(AuthorizeHostCall("host:a", "a", false).allowed);

  // Host a's certificate speaking for host b: 403 naming both.
  HostCallDecision other = AuthorizeHostCall("host:a", "b", false);
  EXPECT_FALSE(other.allowed);
  EXPECT_EQ(other.status, 403);
  EXPECT_NE(other.reason.find("'a'"), std::string::npos) << other.reason;
  EXPECT_NE(other.reason.find("'b'"), std::string::npos) << other.reason;

  // The join token alone (no certificate), or a user's certificate.
  HostCallDecision none = AuthorizeHostCall("", "a", false);
  EXPECT_FALSE(none.allowed);
  EXPECT_NE(none.reason.find("bootstrap"), std::string::npos) << none.reason;
  HostCallDecision user = AuthorizeHostCall("user:alice", "a", false);
  EXPECT_FALSE(user.allowed);
  EXPECT_NE(user.reason.find("user:alice"), std::string::npos) << user.reason;

  // Its own certificate, but revoked.
  HostCallDecision revoked = AuthorizeHostCall("host:a", "a", true);
  EXPECT_FALSE(revoked.allowed);
  EXPECT_NE(revoked.reason.find("revoked"), std::string::npos) << revoked.reason;
}

class HostCertIssuerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera-host-certs-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    auto ca = pki::MakeCa({});
    ASSERT_TRUE(ca.ok()) << ca.status().ToString();
    ca_ = *ca;
    ASSERT_TRUE(pki::WriteFile(Path("ca.crt"), ca_.cert_pem).ok());
    ASSERT_TRUE(pki::WriteKeyFile(Path("ca.key"), ca_.key_pem).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::unique_ptr<store::Store> OpenStore() {
    auto s = store::SqliteStore::Open(Path("tessera.db"));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }

  std::filesystem::path dir_;
  pki::CertAndKey ca_;
};

TEST_F(HostCertIssuerTest, IssuesShortLivedHostCertificatesAndKeepsTheDenyList) {
  auto store = OpenStore();
  HostCertIssuer issuer(*store, {Path("ca.crt"), Path("ca.key"), std::chrono::seconds(120)});
  ASSERT_TRUE(issuer.Load().ok());
  auto csr = pki::MakeCsr("host:somebody-else");  // the requested subject is ignored
  ASSERT_TRUE(csr.ok());
  auto issued = issuer.Issue("node-1", csr->csr_pem);
  ASSERT_TRUE(issued.ok()) << issued.status().ToString();
  auto info = pki::ReadCertificate(issued->cert_pem);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->common_name, "host:node-1");
  EXPECT_EQ(info->dns_names, std::vector<std::string>{"node-1.host.tessera"});
  // Ends `ttl` from now; starts a tenth of it earlier, for clocks a little behind.
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  EXPECT_NEAR(static_cast<double>(info->not_after_unix), static_cast<double>(now + 120), 5);
  EXPECT_NEAR(static_cast<double>(info->not_before_unix), static_cast<double>(now - 12), 5);
  EXPECT_EQ(issued->not_after_unix, info->not_after_unix);
  EXPECT_TRUE(pki::VerifyCertificate(issued->ca_pem, issued->cert_pem).ok());

  ASSERT_TRUE(issuer.Revoke("node-1", 1000).ok());
  auto refused = issuer.Issue("node-1", csr->csr_pem);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("revoked"), std::string::npos);

  // A restarted head finds the revocation in the store.
  HostCertIssuer restarted(*store, {Path("ca.crt"), Path("ca.key"), std::chrono::hours(24)});
  ASSERT_TRUE(restarted.Load().ok());
  EXPECT_TRUE(restarted.IsRevoked("node-1"));
  EXPECT_FALSE(restarted.IsRevoked("node-2"));
  ASSERT_TRUE(restarted.Readmit("node-1").ok());
  EXPECT_FALSE(restarted.IsRevoked("node-1"));
  EXPECT_EQ(restarted.Readmit("node-1").code(), StatusCode::kNotFound);
  EXPECT_TRUE(restarted.Issue("node-1", csr->csr_pem).ok());
}

TEST_F(HostCertIssuerTest, RefusesAGarbledCsr) {
  auto store = OpenStore();
  HostCertIssuer issuer(*store, {Path("ca.crt"), Path("ca.key"), std::chrono::hours(24)});
  ASSERT_TRUE(issuer.Load().ok());
  auto bad = issuer.Issue("node-1", "not a csr");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("csr"), std::string::npos);
}

}  // namespace
}  // namespace tessera::api
