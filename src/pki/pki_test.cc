#include "pki/pki.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace tessera::pki {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

class PkiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<CertAndKey> ca = MakeCa({});
    ASSERT_TRUE(ca.ok()) << ca.status().ToString();
    ca_ = *ca;
  }
  CertAndKey ca_;
};

TEST_F(PkiTest, CaIsSelfSignedAndLongLived) {
  Result<CertInfo> info = ReadCertificate(ca_.cert_pem);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(info->is_ca);
  EXPECT_EQ(info->common_name, "tessera cluster CA");
  EXPECT_EQ(info->issuer_common_name, info->common_name);
  EXPECT_GT(info->not_after_unix - info->not_before_unix, int64_t{9} * 365 * 24 * 3600);
  EXPECT_TRUE(VerifyCertificate(ca_.cert_pem, ca_.cert_pem).ok());
  EXPECT_TRUE(CheckKeyMatchesCert(ca_.cert_pem, ca_.key_pem).ok());
}

TEST_F(PkiTest, ServerCertCarriesItsNamesAndVerifies) {
  ServerCertOptions options;
  options.dns_names = {"localhost", "head.example"};
  options.ip_addresses = {"127.0.0.1", "::1"};
  Result<CertAndKey> server = MakeServerCert(ca_, options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Result<CertInfo> info = ReadCertificate(server->cert_pem);
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->is_ca);
  EXPECT_TRUE(Contains(info->dns_names, "head.example"));
  EXPECT_TRUE(Contains(info->ip_addresses, "127.0.0.1"));
  EXPECT_EQ(info->ip_addresses.size(), 2u);
  EXPECT_EQ(info->issuer_common_name, "tessera cluster CA");
  EXPECT_TRUE(VerifyCertificate(ca_.cert_pem, server->cert_pem).ok());
  EXPECT_TRUE(CheckKeyMatchesCert(server->cert_pem, server->key_pem).ok());
}

TEST_F(PkiTest, ClientCertNamesTheIdentity) {
  Result<CertAndKey> client = MakeClientCert(ca_, {"user:alice", "user"});
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Result<CertInfo> info = ReadCertificate(client->cert_pem);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->common_name, "user:alice");
  EXPECT_EQ(info->organization, "user");
  EXPECT_EQ(info->not_after_unix - info->not_before_unix, 24 * 3600);
  EXPECT_TRUE(VerifyCertificate(ca_.cert_pem, client->cert_pem).ok());
}

TEST_F(PkiTest, SignCsrUsesTheAuthorisedSubjectNotTheRequestedOne) {
  Result<CsrAndKey> csr = MakeCsr("host:someone-else");
  ASSERT_TRUE(csr.ok()) << csr.status().ToString();
  Result<std::string> cert = SignCsr(ca_, csr->csr_pem, {"host:node-1", "host"});
  ASSERT_TRUE(cert.ok()) << cert.status().ToString();
  Result<CertInfo> info = ReadCertificate(*cert);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->common_name, "host:node-1");
  EXPECT_EQ(info->organization, "host");
  EXPECT_FALSE(info->is_ca);
  EXPECT_EQ(info->not_after_unix - info->not_before_unix, 24 * 3600);
  EXPECT_TRUE(VerifyCertificate(ca_.cert_pem, *cert).ok());
  // The requester's key is the certificate's key.
  EXPECT_TRUE(CheckKeyMatchesCert(*cert, csr->key_pem).ok());
}

TEST_F(PkiTest, GarbledPemIsRefusedNamingWhat) {
  Result<CertInfo> info = ReadCertificate("-----BEGIN CERTIFICATE-----\nAAAA\n", "ca.crt");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("ca.crt"), std::string::npos);

  Result<std::string> signed_csr = SignCsr(ca_, "not a csr", {"host:a", "host"});
  ASSERT_FALSE(signed_csr.ok());
  EXPECT_NE(signed_csr.status().message().find("csr"), std::string::npos);

  CertAndKey broken_ca = ca_;
  broken_ca.key_pem = "garbage";
  Result<CertAndKey> client = MakeClientCert(broken_ca, {"user:a", "user"});
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("ca key"), std::string::npos);
}

TEST_F(PkiTest, TamperedCsrIsRefused) {
  Result<CsrAndKey> csr = MakeCsr("host:a");
  ASSERT_TRUE(csr.ok());
  // Flip a character inside the base64 body (past the header line).
  std::string tampered = csr->csr_pem;
  size_t pos = tampered.find('\n') + 40;
  tampered[pos] = tampered[pos] == 'A' ? 'B' : 'A';
  Result<std::string> cert = SignCsr(ca_, tampered, {"host:a", "host"});
  ASSERT_FALSE(cert.ok());
  EXPECT_EQ(cert.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(PkiTest, CaKeyFromAnotherCaIsRefused) {
  Result<CertAndKey> other = MakeCa({});
  ASSERT_TRUE(other.ok());
  CertAndKey mixed{ca_.cert_pem, other->key_pem};
  Result<CertAndKey> client = MakeClientCert(mixed, {"user:a", "user"});
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("does not belong"), std::string::npos);
}

TEST_F(PkiTest, CertFromAnotherCaFailsVerification) {
  Result<CertAndKey> other = MakeCa({});
  ASSERT_TRUE(other.ok());
  Result<CertAndKey> client = MakeClientCert(*other, {"host:a", "host"});
  ASSERT_TRUE(client.ok());
  Status s = VerifyCertificate(ca_.cert_pem, client->cert_pem);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
}

TEST_F(PkiTest, ExpiredCertFailsVerification) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  // A CA valid since ten days ago, so that the certificate's own validity is what fails.
  CaOptions old_ca;
  old_ca.validity = {std::chrono::hours(24 * 365), now - 10 * 24 * 3600};
  Result<CertAndKey> ca = MakeCa(old_ca);
  ASSERT_TRUE(ca.ok());
  ca_ = *ca;
  Validity past{std::chrono::hours(24), now - 3 * 24 * 3600};
  Result<CertAndKey> client = MakeClientCert(ca_, {"host:a", "host"}, past);
  ASSERT_TRUE(client.ok());
  Status s = VerifyCertificate(ca_.cert_pem, client->cert_pem);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("expired"), std::string::npos) << s.ToString();
  // The same certificate verifies at a time inside its validity.
  EXPECT_TRUE(VerifyCertificate(ca_.cert_pem, client->cert_pem, *past.not_before_unix + 3600).ok());
}

TEST_F(PkiTest, WrongNamesAndIdentitiesAreRefused) {
  ServerCertOptions none;
  EXPECT_EQ(MakeServerCert(ca_, none).status().code(), StatusCode::kInvalidArgument);
  ServerCertOptions bad_ip;
  bad_ip.ip_addresses = {"300.1.1.1"};
  Result<CertAndKey> r = MakeServerCert(ca_, bad_ip);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ip_addresses"), std::string::npos);
  EXPECT_EQ(MakeClientCert(ca_, {"", "user"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeClientCert(ca_, {std::string(65, 'x'), "user"}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(PkiTest, KeyFilesAreWrittenOwnerOnly) {
  char dir_template[] = "/tmp/tessera-pki-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  std::string dir = dir_template;
  mode_t old_umask = ::umask(0);  // the mode must not depend on the umask
  Status written = WriteKeyFile(dir + "/ca.key", ca_.key_pem);
  ::umask(old_umask);
  ASSERT_TRUE(written.ok()) << written.ToString();
  ASSERT_TRUE(WriteFile(dir + "/ca.crt", ca_.cert_pem).ok());
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Result<std::string> back = ReadPemFile(dir + "/ca.key");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, ca_.key_pem);
  EXPECT_EQ(ReadPemFile(dir + "/missing.crt").status().code(), StatusCode::kNotFound);
  std::remove((dir + "/ca.key").c_str());
  std::remove((dir + "/ca.crt").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace tessera::pki
