// PrepareHeadTls: the CA is made once and kept; the server certificate names what it must,
// is kept while good and made again when a name is added or the CA changes.
#include "api/head_tls.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "pki/pki.h"

namespace tessera::api {
namespace {

class HeadTlsTest : public ::testing::Test {
 protected:
  HeadTlsTest() {
    char dir_template[] = "/tmp/tessera-head-tls-test-XXXXXX";
    dir_ = ::mkdtemp(dir_template);
  }
  ~HeadTlsTest() override { std::filesystem::remove_all(dir_); }
  std::string Read(const std::string& name) {
    Result<std::string> text = pki::ReadPemFile(dir_ + "/" + name);
    EXPECT_TRUE(text.ok()) << text.status().ToString();
    return text.ok() ? *text : "";
  }
  std::string dir_;
};

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST_F(HeadTlsTest, FirstStartMakesTheCaAndACertificateForEveryAddress) {
  Result<net::ServerTlsOptions> tls = PrepareHeadTls(dir_, {"127.0.0.1", {"head.example"}});
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  EXPECT_EQ(tls->cert_chain_file, dir_ + "/server.crt");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_ + "/server.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Result<pki::CertInfo> info = pki::ReadCertificate(Read("server.crt"));
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(Has(info->ip_addresses, "127.0.0.1"));
  EXPECT_TRUE(Has(info->ip_addresses, "::1"));
  EXPECT_TRUE(Has(info->dns_names, "localhost"));
  EXPECT_TRUE(Has(info->dns_names, "head.example"));
  EXPECT_TRUE(pki::VerifyCertificate(Read("ca.crt"), Read("server.crt")).ok());
}

TEST_F(HeadTlsTest, RestartKeepsTheCaAndRenewsOnlyWhenNeeded) {
  ASSERT_TRUE(PrepareHeadTls(dir_, {"127.0.0.1", {}}).ok());
  const std::string ca = Read("ca.crt");
  const std::string server = Read("server.crt");
  ASSERT_TRUE(PrepareHeadTls(dir_, {"127.0.0.1", {}}).ok());
  EXPECT_EQ(Read("ca.crt"), ca);
  EXPECT_EQ(Read("server.crt"), server);  // still good: kept
  ASSERT_TRUE(PrepareHeadTls(dir_, {"127.0.0.1", {"new.example"}}).ok());
  EXPECT_EQ(Read("ca.crt"), ca);
  EXPECT_NE(Read("server.crt"), server);  // a name was added: made again
  Result<pki::CertInfo> info = pki::ReadCertificate(Read("server.crt"));
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(Has(info->dns_names, "new.example"));
}

TEST_F(HeadTlsTest, ACertificateWithoutItsKeyOrAGarbledCaIsRefused) {
  ASSERT_TRUE(PrepareHeadTls(dir_, {"127.0.0.1", {}}).ok());
  std::filesystem::remove(dir_ + "/ca.key");
  Result<net::ServerTlsOptions> no_key = PrepareHeadTls(dir_, {"127.0.0.1", {}});
  ASSERT_FALSE(no_key.ok());
  EXPECT_NE(no_key.status().message().find("ca.key"), std::string::npos);

  ASSERT_TRUE(pki::WriteKeyFile(dir_ + "/ca.key", "garbage").ok());
  Result<net::ServerTlsOptions> garbled = PrepareHeadTls(dir_, {"127.0.0.1", {}});
  ASSERT_FALSE(garbled.ok());
  EXPECT_EQ(garbled.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::api
