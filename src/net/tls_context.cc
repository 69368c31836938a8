// The TLS contexts of tls_stream.h: protocol versions, ciphers, certificate files, client
// certificate modes, server-name checks and the peer's identity, on Boost.Asio's ssl::context
// and the OpenSSL calls it does not wrap.
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <string>
#include <string_view>

#include "net/tls_stream.h"

namespace tessera::net {
namespace {

// TLS 1.2 suites with forward secrecy and AEAD only; TLS 1.3's suites are all modern.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

std::string FileError(std::string_view option, const std::string& file,
                      const boost::system::error_code& ec) {
  unsigned long code = ERR_get_error();
  std::string reason = code != 0 && ERR_reason_error_string(code) != nullptr
                           ? ERR_reason_error_string(code)
                           : ec.message();
  ERR_clear_error();
  return std::string(option) + " '" + file + "': cannot load: " + reason;
}

Status Harden(ssl::context& context) {
  SSL_CTX* native = context.native_handle();
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_cipher_list(native, kTls12Ciphers) != 1) {
    ERR_clear_error();
    return Internal("TLS: cannot restrict protocol versions and ciphers");
  }
  // No session resumption: tickets would sit unread on an idle keep-alive connection and make
  // the client's staleness check (a peek) take it for closed.
  SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION | SSL_OP_NO_TICKET |
                                  SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_num_tickets(native, 0);
  SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_OFF);
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<ssl::context>> MakeServerTlsContext(const ServerTlsOptions& options) {
  if (options.key_file.empty()) {
    return InvalidArgument("tls.key_file: empty; a TLS server needs the key of its certificate");
  }
  if (options.client_certs != ClientCertMode::kNone && options.client_ca_file.empty()) {
    return InvalidArgument(
        "tls.client_ca_file: empty; requesting client certificates needs the CA to verify them");
  }
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  TESSERA_RETURN_IF_ERROR(Harden(*context));
  boost::system::error_code ec;
  context->use_certificate_chain_file(options.cert_chain_file, ec);
  if (ec) return InvalidArgument(FileError("tls.cert_chain_file", options.cert_chain_file, ec));
  context->use_private_key_file(options.key_file, ssl::context::pem, ec);
  if (ec) {
    return InvalidArgument(FileError("tls.key_file", options.key_file, ec) +
                           " (it must be the key of the certificate in '" +
                           options.cert_chain_file + "')");
  }
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    ERR_clear_error();
    return InvalidArgument("tls.key_file '" + options.key_file +
                           "': not the key of the certificate in '" + options.cert_chain_file +
                           "'");
  }
  if (!options.client_ca_file.empty()) {
    context->load_verify_file(options.client_ca_file, ec);
    if (ec) return InvalidArgument(FileError("tls.client_ca_file", options.client_ca_file, ec));
    // Tell clients which CA to pick a certificate from.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.client_ca_file.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(context->native_handle(), names);
    ERR_clear_error();
  }
  switch (options.client_certs) {
    case ClientCertMode::kNone:
      context->set_verify_mode(ssl::verify_none);
      break;
    case ClientCertMode::kRequest:
      context->set_verify_mode(ssl::verify_peer);
      break;
    case ClientCertMode::kRequire:
      context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
      break;
  }
  return context;
}

Result<std::shared_ptr<ssl::context>> MakeClientTlsContext(const ClientTlsOptions& options) {
  if (options.ca_file.empty()) {
    return InvalidArgument(
        "tls.ca_file: empty; name the cluster CA (ca.crt in the head's state directory) to "
        "verify the server with");
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return InvalidArgument("tls.cert_file and tls.key_file: give both or neither");
  }
  auto context = std::make_shared<ssl::context>(ssl::context::tls_client);
  TESSERA_RETURN_IF_ERROR(Harden(*context));
  boost::system::error_code ec;
  context->load_verify_file(options.ca_file, ec);
  if (ec) return InvalidArgument(FileError("tls.ca_file", options.ca_file, ec));
  context->set_verify_mode(ssl::verify_peer);
  if (!options.cert_file.empty()) {
    context->use_certificate_chain_file(options.cert_file, ec);
    if (ec) return InvalidArgument(FileError("tls.cert_file", options.cert_file, ec));
    context->use_private_key_file(options.key_file, ssl::context::pem, ec);
    if (ec) return InvalidArgument(FileError("tls.key_file", options.key_file, ec));
  }
  return context;
}

Status ExpectServerName(beast::ssl_stream<beast::tcp_stream>& stream, const std::string& name) {
  return ExpectServerName(stream.native_handle(), name);
}

Status ExpectServerName(SSL* native, const std::string& name) {
  X509_VERIFY_PARAM* param = SSL_get0_param(native);
  boost::system::error_code ec;
  asio::ip::make_address(name, ec);
  bool is_ip = !ec;
  int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                 : X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size());
  if (ok != 1 || (!is_ip && SSL_set_tlsext_host_name(native, name.c_str()) != 1)) {
    ERR_clear_error();
    return InvalidArgument("tls.server_name '" + name + "': not a host name or IP address");
  }
  return Status::Ok();
}

std::string PeerIdentity(beast::ssl_stream<beast::tcp_stream>& stream) {
  SSL* native = stream.native_handle();
  X509* cert = SSL_get0_peer_certificate(native);
  if (cert == nullptr || SSL_get_verify_result(native) != X509_V_OK) return {};
  X509_NAME* subject = X509_get_subject_name(cert);
  int i = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (i < 0) return {};
  unsigned char* utf8 = nullptr;
  int n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i)));
  if (n < 0) return {};
  std::string identity(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
  OPENSSL_free(utf8);
  return identity;
}

}  // namespace tessera::net
