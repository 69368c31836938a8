// The PKI functions of pki.h on OpenSSL 3's EVP and X509 APIs. OpenSSL objects are held in
// unique_ptrs with their free functions, so every early return releases what was made.
#include "pki/pki.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <utility>

namespace tessera::pki {
namespace {

template <class T, void (*Free)(T*)>
struct Freer {
  void operator()(T* p) const { Free(p); }
};
using BioPtr = std::unique_ptr<BIO, Freer<BIO, BIO_free_all>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Freer<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Freer<X509, X509_free>>;
using ReqPtr = std::unique_ptr<X509_REQ, Freer<X509_REQ, X509_REQ_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Freer<X509_EXTENSION, X509_EXTENSION_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Freer<X509_STORE, X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Freer<X509_STORE_CTX, X509_STORE_CTX_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Freer<BIGNUM, BN_free>>;

// The reason OpenSSL gave for the last failure, and clears its error queue.
std::string OpenSslReason() {
  unsigned long code = ERR_get_error();
  std::string reason = code == 0                                  ? "unknown error"
                       : ERR_reason_error_string(code) != nullptr ? ERR_reason_error_string(code)
                                                                  : "error " + std::to_string(code);
  ERR_clear_error();
  return reason;
}

Status Fail(std::string_view what) { return Internal(std::string(what) + ": " + OpenSslReason()); }

BioPtr MemoryBio(std::string_view text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

Result<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return Fail("generating a P-256 key");
  return key;
}

Result<std::string> KeyToPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return Fail("writing a private key as PEM");
  return BioText(bio.get());
}

Result<std::string> CertToPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) return Fail("writing a certificate");
  return BioText(bio.get());
}

Result<X509Ptr> ParseCert(std::string_view pem, std::string_view what) {
  BioPtr bio = MemoryBio(pem);
  X509Ptr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) {
    return InvalidArgument(std::string(what) + ": not a PEM certificate (" + OpenSslReason() +
                           "); expected '-----BEGIN CERTIFICATE-----'");
  }
  return cert;
}

Result<KeyPtr> ParseKey(std::string_view pem, std::string_view what) {
  BioPtr bio = MemoryBio(pem);
  KeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) {
    return InvalidArgument(std::string(what) + ": not a PEM private key (" + OpenSslReason() +
                           "); expected '-----BEGIN PRIVATE KEY-----'");
  }
  return key;
}

// The CA's certificate and key, checked to belong together.
struct ParsedCa {
  X509Ptr cert;
  KeyPtr key;
};

Result<ParsedCa> ParseCa(const CertAndKey& ca) {
  Result<X509Ptr> cert = ParseCert(ca.cert_pem, "ca certificate");
  if (!cert.ok()) return cert.status();
  Result<KeyPtr> key = ParseKey(ca.key_pem, "ca key");
  if (!key.ok()) return key.status();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("ca: the key does not belong to the certificate");
  }
  return ParsedCa{std::move(*cert), std::move(*key)};
}

int64_t NowUnix() { return static_cast<int64_t>(std::time(nullptr)); }

// Sets a random 127-bit serial, the subject, the validity and the public key.
Status FillCert(X509* cert, EVP_PKEY* public_key, const std::string& common_name,
                const std::string& organization, const Validity& validity) {
  if (X509_set_version(cert, 2) != 1) return Fail("setting the certificate version");
  unsigned char serial_bytes[16];
  if (RAND_bytes(serial_bytes, sizeof serial_bytes) != 1) return Fail("drawing a serial");
  serial_bytes[0] &= 0x7f;  // positive
  BnPtr serial(BN_bin2bn(serial_bytes, sizeof serial_bytes, nullptr));
  if (!serial || BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert)) == nullptr)
    return Fail("setting the serial");
  // A minute back, for peers whose clocks are a little behind ours.
  int64_t start = validity.not_before_unix.value_or(NowUnix() - 60);
  int64_t end = start + std::chrono::duration_cast<std::chrono::seconds>(validity.validity).count();
  if (ASN1_TIME_set(X509_getm_notBefore(cert), static_cast<time_t>(start)) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert), static_cast<time_t>(end)) == nullptr) {
    return Fail("setting the validity");
  }
  X509_NAME* name = X509_get_subject_name(cert);
  auto add = [&](const char* field, const std::string& value) {
    return value.empty() ||
           X509_NAME_add_entry_by_txt(name, field, MBSTRING_UTF8,
                                      reinterpret_cast<const unsigned char*>(value.data()),
                                      static_cast<int>(value.size()), -1, 0) == 1;
  };
  if (!add("O", organization) || !add("CN", common_name)) return Fail("setting the subject");
  if (X509_set_pubkey(cert, public_key) != 1) return Fail("setting the public key");
  return Status::Ok();
}

Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return Fail("adding the extension " + std::string(OBJ_nid2sn(nid)) + "=" + value);
  }
  return Status::Ok();
}

Status Sign(X509* cert, EVP_PKEY* signer) {
  if (X509_sign(cert, signer, EVP_sha256()) <= 0) return Fail("signing the certificate");
  return Status::Ok();
}

// A certificate for `public_key` issued by `ca` with the given key usages.
Result<std::string> Issue(const ParsedCa& ca, EVP_PKEY* public_key, const std::string& cn,
                          const std::string& organization, const Validity& validity,
                          const std::string& extended_usage, const std::string& alt_names) {
  X509Ptr cert(X509_new());
  if (!cert) return Fail("allocating a certificate");
  TESSERA_RETURN_IF_ERROR(FillCert(cert.get(), public_key, cn, organization, validity));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.cert.get())) != 1)
    return Fail("setting the issuer");
  TESSERA_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.cert.get(), NID_basic_constraints, "critical,CA:FALSE"));
  TESSERA_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.cert.get(), NID_key_usage, "critical,digitalSignature"));
  TESSERA_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.cert.get(), NID_ext_key_usage, extended_usage));
  TESSERA_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.cert.get(), NID_subject_key_identifier, "hash"));
  TESSERA_RETURN_IF_ERROR(
      AddExtension(cert.get(), ca.cert.get(), NID_authority_key_identifier, "keyid:always"));
  if (!alt_names.empty()) {
    TESSERA_RETURN_IF_ERROR(
        AddExtension(cert.get(), ca.cert.get(), NID_subject_alt_name, alt_names));
  }
  TESSERA_RETURN_IF_ERROR(Sign(cert.get(), ca.key.get()));
  return CertToPem(cert.get());
}

Status CheckIdentity(const ClientIdentity& who) {
  if (who.identity.empty()) {
    return InvalidArgument("identity: empty; name who the certificate is for (\"host:NAME\")");
  }
  if (who.identity.size() > 64) {
    return InvalidArgument("identity: '" + who.identity +
                           "' is longer than 64 characters, the limit of a certificate's CN");
  }
  return Status::Ok();
}

bool IsIpLiteral(const std::string& text) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, text.c_str(), buf) == 1 ||
         ::inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

// An IP subjectAltName (4 or 16 bytes) as text ("127.0.0.1", "::1"); "" for another length.
std::string IpText(const ASN1_OCTET_STRING* ip) {
  const int n = ASN1_STRING_length(ip);
  const unsigned char* bytes = ASN1_STRING_get0_data(ip);
  char text[INET6_ADDRSTRLEN] = {};
  if (n == 4) return ::inet_ntop(AF_INET, bytes, text, sizeof text) ? text : "";
  if (n == 16) return ::inet_ntop(AF_INET6, bytes, text, sizeof text) ? text : "";
  return {};
}

std::string NameEntry(X509_NAME* name, int nid) {
  int i = X509_NAME_get_index_by_NID(name, nid, -1);
  if (i < 0) return {};
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
  unsigned char* utf8 = nullptr;
  int n = ASN1_STRING_to_UTF8(&utf8, data);
  if (n < 0) return {};
  std::string out(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
  OPENSSL_free(utf8);
  return out;
}

int64_t TimeUnix(const ASN1_TIME* t) {
  struct tm tm {};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace

Result<CertAndKey> MakeCa(const CaOptions& options) {
  Result<KeyPtr> key = NewKey();
  if (!key.ok()) return key.status();
  X509Ptr cert(X509_new());
  if (!cert) return Fail("allocating a certificate");
  TESSERA_RETURN_IF_ERROR(
      FillCert(cert.get(), key->get(), options.common_name, "tessera", options.validity));
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) != 1)
    return Fail("setting the issuer");
  TESSERA_RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE"));
  TESSERA_RETURN_IF_ERROR(
      AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign"));
  TESSERA_RETURN_IF_ERROR(AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash"));
  TESSERA_RETURN_IF_ERROR(Sign(cert.get(), key->get()));
  Result<std::string> cert_pem = CertToPem(cert.get());
  if (!cert_pem.ok()) return cert_pem.status();
  Result<std::string> key_pem = KeyToPem(key->get());
  if (!key_pem.ok()) return key_pem.status();
  return CertAndKey{std::move(*cert_pem), std::move(*key_pem)};
}

Result<CertAndKey> MakeServerCert(const CertAndKey& ca, const ServerCertOptions& options) {
  if (options.dns_names.empty() && options.ip_addresses.empty()) {
    return InvalidArgument(
        "server certificate: no subjectAltName; give at least one DNS name or IP address");
  }
  std::string alt_names;
  for (const std::string& dns : options.dns_names) {
    if (dns.empty() || dns.find_first_of(", ") != std::string::npos) {
      return InvalidArgument("dns_names: '" + dns + "' is not a DNS name");
    }
    alt_names += (alt_names.empty() ? "DNS:" : ",DNS:") + dns;
  }
  for (const std::string& ip : options.ip_addresses) {
    if (!IsIpLiteral(ip)) {
      return InvalidArgument("ip_addresses: '" + ip + "' is not an IPv4 or IPv6 address");
    }
    alt_names += (alt_names.empty() ? "IP:" : ",IP:") + ip;
  }
  Result<ParsedCa> parsed = ParseCa(ca);
  if (!parsed.ok()) return parsed.status();
  Result<KeyPtr> key = NewKey();
  if (!key.ok()) return key.status();
  Result<std::string> cert =
      Issue(*parsed, key->get(), options.common_name, "tessera", options.validity,
            options.also_client_auth ? "serverAuth,clientAuth" : "serverAuth", alt_names);
  if (!cert.ok()) return cert.status();
  Result<std::string> key_pem = KeyToPem(key->get());
  if (!key_pem.ok()) return key_pem.status();
  return CertAndKey{std::move(*cert), std::move(*key_pem)};
}

Result<CertAndKey> MakeClientCert(const CertAndKey& ca, const ClientIdentity& who,
                                  const Validity& validity) {
  TESSERA_RETURN_IF_ERROR(CheckIdentity(who));
  Result<ParsedCa> parsed = ParseCa(ca);
  if (!parsed.ok()) return parsed.status();
  Result<KeyPtr> key = NewKey();
  if (!key.ok()) return key.status();
  Result<std::string> cert =
      Issue(*parsed, key->get(), who.identity, who.kind, validity, "clientAuth", "");
  if (!cert.ok()) return cert.status();
  Result<std::string> key_pem = KeyToPem(key->get());
  if (!key_pem.ok()) return key_pem.status();
  return CertAndKey{std::move(*cert), std::move(*key_pem)};
}

Result<CsrAndKey> MakeCsr(std::string_view common_name) {
  Result<KeyPtr> key = NewKey();
  if (!key.ok()) return key.status();
  ReqPtr req(X509_REQ_new());
  if (!req) return Fail("allocating a CSR");
  std::string cn(common_name);
  X509_NAME* name = X509_REQ_get_subject_name(req.get());
  if (!cn.empty() && X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                                reinterpret_cast<const unsigned char*>(cn.data()),
                                                static_cast<int>(cn.size()), -1, 0) != 1) {
    return Fail("setting the CSR subject");
  }
  if (X509_REQ_set_pubkey(req.get(), key->get()) != 1 ||
      X509_REQ_sign(req.get(), key->get(), EVP_sha256()) <= 0) {
    return Fail("signing the CSR");
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509_REQ(bio.get(), req.get()) != 1) return Fail("writing the CSR");
  Result<std::string> key_pem = KeyToPem(key->get());
  if (!key_pem.ok()) return key_pem.status();
  return CsrAndKey{BioText(bio.get()), std::move(*key_pem)};
}

namespace {

// The public key of `csr_pem`, once its signature verifies (the requester holds the key).
Result<ReqPtr> ParseCsr(std::string_view csr_pem) {
  BioPtr bio = MemoryBio(csr_pem);
  ReqPtr req(bio ? PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!req) {
    return InvalidArgument("csr: not a PEM certificate request (" + OpenSslReason() +
                           "); expected '-----BEGIN CERTIFICATE REQUEST-----'");
  }
  EVP_PKEY* public_key = X509_REQ_get0_pubkey(req.get());
  if (public_key == nullptr || X509_REQ_verify(req.get(), public_key) != 1) {
    ERR_clear_error();
    return InvalidArgument("csr: its signature does not verify with its own public key");
  }
  return req;
}

}  // namespace

Result<std::string> SignCsr(const CertAndKey& ca, std::string_view csr_pem,
                            const ClientIdentity& who, const Validity& validity) {
  TESSERA_RETURN_IF_ERROR(CheckIdentity(who));
  Result<ReqPtr> req = ParseCsr(csr_pem);
  if (!req.ok()) return req.status();
  Result<ParsedCa> parsed = ParseCa(ca);
  if (!parsed.ok()) return parsed.status();
  // The subject and extensions come from `who` and from here, never from the request.
  return Issue(*parsed, X509_REQ_get0_pubkey(req->get()), who.identity, who.kind, validity,
               "clientAuth", "");
}

Result<std::string> SignHostCsr(const CertAndKey& ca, std::string_view csr_pem,
                                const ClientIdentity& who, const std::string& dns_name,
                                const Validity& validity) {
  TESSERA_RETURN_IF_ERROR(CheckIdentity(who));
  if (dns_name.empty() || dns_name.find_first_of(", ") != std::string::npos) {
    return InvalidArgument("dns_name: '" + dns_name + "' is not a DNS name");
  }
  Result<ReqPtr> req = ParseCsr(csr_pem);
  if (!req.ok()) return req.status();
  Result<ParsedCa> parsed = ParseCa(ca);
  if (!parsed.ok()) return parsed.status();
  return Issue(*parsed, X509_REQ_get0_pubkey(req->get()), who.identity, who.kind, validity,
               "clientAuth,serverAuth", "DNS:" + dns_name);
}

Result<CertInfo> ReadCertificate(std::string_view cert_pem, std::string_view what) {
  Result<X509Ptr> cert = ParseCert(cert_pem, what);
  if (!cert.ok()) return cert.status();
  CertInfo info;
  info.common_name = NameEntry(X509_get_subject_name(cert->get()), NID_commonName);
  info.organization = NameEntry(X509_get_subject_name(cert->get()), NID_organizationName);
  info.issuer_common_name = NameEntry(X509_get_issuer_name(cert->get()), NID_commonName);
  info.not_before_unix = TimeUnix(X509_get0_notBefore(cert->get()));
  info.not_after_unix = TimeUnix(X509_get0_notAfter(cert->get()));
  info.is_ca = X509_check_ca(cert->get()) != 0;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert->get(), NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* entry = sk_GENERAL_NAME_value(names, i);
    if (entry->type == GEN_DNS) {
      const ASN1_IA5STRING* dns = entry->d.dNSName;
      info.dns_names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                                  static_cast<size_t>(ASN1_STRING_length(dns)));
    } else if (entry->type == GEN_IPADD) {
      std::string text = IpText(entry->d.iPAddress);
      if (!text.empty()) info.ip_addresses.push_back(std::move(text));
    }
  }
  GENERAL_NAMES_free(names);
  ERR_clear_error();
  return info;
}

Status VerifyCertificate(std::string_view ca_cert_pem, std::string_view cert_pem,
                         std::optional<int64_t> now_unix) {
  Result<X509Ptr> ca = ParseCert(ca_cert_pem, "ca certificate");
  if (!ca.ok()) return ca.status();
  Result<X509Ptr> cert = ParseCert(cert_pem, "certificate");
  if (!cert.ok()) return cert.status();
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca->get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert->get(), nullptr) != 1) {
    return Fail("setting up certificate verification");
  }
  if (now_unix.has_value()) {
    X509_VERIFY_PARAM_set_time(X509_STORE_CTX_get0_param(ctx.get()),
                               static_cast<time_t>(*now_unix));
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    int error = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return FailedPrecondition("certificate does not verify against the CA: " +
                              std::string(X509_verify_cert_error_string(error)));
  }
  return Status::Ok();
}

Status CheckKeyMatchesCert(std::string_view cert_pem, std::string_view key_pem) {
  Result<X509Ptr> cert = ParseCert(cert_pem, "certificate");
  if (!cert.ok()) return cert.status();
  Result<KeyPtr> key = ParseKey(key_pem, "key");
  if (!key.ok()) return key.status();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("key: does not belong to the certificate");
  }
  return Status::Ok();
}

Result<CertAndKey> ReadCa(const std::string& cert_file, const std::string& key_file) {
  Result<std::string> cert = ReadPemFile(cert_file);
  if (!cert.ok()) return cert.status();
  Result<std::string> key = ReadPemFile(key_file);
  if (!key.ok()) return key.status();
  Status matches = CheckKeyMatchesCert(*cert, *key);
  if (!matches.ok())
    return InvalidArgument(key_file + ": not the key of " + cert_file + " (" + matches.message() +
                           ")");
  return CertAndKey{std::move(*cert), std::move(*key)};
}

Result<std::string> ReadPemFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return Unavailable(path + ": cannot read: " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Unavailable(path + ": read failed");
  return text.str();
}

Status WriteFile(const std::string& path, std::string_view contents, uint32_t mode) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Unavailable(tmp + ": cannot create: " + std::strerror(errno));
  // open() applies the umask; the mode must be exact (0600 for keys, whatever the umask).
  bool ok = ::fchmod(fd, mode) == 0;
  size_t written = 0;
  while (ok && written < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) written += static_cast<size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  std::string error = ok ? "" : std::strerror(errno);
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    error = std::strerror(errno);
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return Unavailable(path + ": cannot write: " + error);
  }
  return Status::Ok();
}

Status WriteKeyFile(const std::string& path, std::string_view key_pem) {
  return WriteFile(path, key_pem, 0600);
}

}  // namespace tessera::pki
