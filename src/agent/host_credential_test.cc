#include "agent/host_credential.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>

#include "pki/pki.h"

namespace tessera::agent {
namespace {

TEST(RenewAtUnix, ThreeQuartersThroughTheLife) {
  EXPECT_EQ(RenewAtUnix(1000, 1000 + 24 * 3600), 1000 + 18 * 3600);
  EXPECT_EQ(RenewAtUnix(0, 40), 30);
  // A certificate without a life is renewed at once.
  EXPECT_EQ(RenewAtUnix(500, 500), 500);
  EXPECT_EQ(RenewAtUnix(500, 100), 500);
}

class LoadHostCertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera-host-credential-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    auto ca = pki::MakeCa({});
    ASSERT_TRUE(ca.ok());
    ca_ = *ca;
    ASSERT_TRUE(pki::WriteFile(Path("ca.crt"), ca_.cert_pem).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  // A host.pem for `identity` signed by `ca`, valid from `not_before` for `seconds`.
  void WriteCert(const pki::CertAndKey& ca, const std::string& identity, int64_t not_before,
                 int64_t seconds) {
    auto made = pki::MakeClientCert(ca, {identity, "host"},
                                    pki::Validity{std::chrono::seconds(seconds), not_before});
    ASSERT_TRUE(made.ok());
    ASSERT_TRUE(pki::WriteKeyFile(Path("host.pem"), made->cert_pem + made->key_pem).ok());
  }

  std::filesystem::path dir_;
  pki::CertAndKey ca_;
};

TEST_F(LoadHostCertTest, KeepsOnlyAValidCertificateForItsOwnHost) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::string why;
  EXPECT_FALSE(LoadHostCert(Path("host.pem"), Path("ca.crt"), "node-1", now, &why));
  EXPECT_NE(why.find("no such file"), std::string::npos) << why;

  WriteCert(ca_, "host:node-1", now - 60, 3600);
  auto held = LoadHostCert(Path("host.pem"), Path("ca.crt"), "node-1", now, &why);
  ASSERT_TRUE(held) << why;
  EXPECT_EQ(held->not_after_unix - held->not_before_unix, 3600);
  EXPECT_EQ(std::filesystem::status(Path("host.pem")).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  // Another host's, an expired one, one from another CA: bootstrap again.
  EXPECT_FALSE(LoadHostCert(Path("host.pem"), Path("ca.crt"), "node-2", now, &why));
  EXPECT_NE(why.find("host:node-1"), std::string::npos) << why;
  WriteCert(ca_, "host:node-1", now - 7200, 3600);
  EXPECT_FALSE(LoadHostCert(Path("host.pem"), Path("ca.crt"), "node-1", now, &why));
  EXPECT_NE(why.find("expired"), std::string::npos) << why;
  auto other = pki::MakeCa({});
  ASSERT_TRUE(other.ok());
  WriteCert(*other, "host:node-1", now - 60, 3600);
  EXPECT_FALSE(LoadHostCert(Path("host.pem"), Path("ca.crt"), "node-1", now, &why));
  EXPECT_NE(why.find("does not verify"), std::string::npos) << why;
}

}  // namespace
}  // namespace tessera::agent
