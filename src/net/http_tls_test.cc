// HttpServer and HttpClient over TLS, on 127.0.0.1 port 0, with certificates from src/pki made
// into a temporary folder: requests, streams and keep-alive as over plain HTTP; the server's
// identity checked against the CA and the name; client certificates required, requested or
// refused; plain HTTP to a TLS port refused with a 400; a client that never finishes its
// handshake dropped.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/http_client.h"
#include "net/http_server.h"
#include "pki/pki.h"

namespace tessera::net {
namespace {

using namespace std::chrono_literals;

// A CA, a server certificate for 127.0.0.1 and localhost, and client certificates, as files.
class TlsFiles {
 public:
  TlsFiles() {
    char dir_template[] = "/tmp/tessera-tls-test-XXXXXX";
    dir_ = ::mkdtemp(dir_template);
    ca_ = MakeCaFiles("ca");
    other_ca_ = MakeCaFiles("other-ca");
    pki::ServerCertOptions server;
    server.dns_names = {"localhost"};
    server.ip_addresses = {"127.0.0.1"};
    Write("server", pki::MakeServerCert(ca_, server));
    Write("alice", pki::MakeClientCert(ca_, {"user:alice", "user"}));
    Write("mallory", pki::MakeClientCert(other_ca_, {"user:mallory", "user"}));
  }
  ~TlsFiles() { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

 private:
  pki::CertAndKey MakeCaFiles(const std::string& name) {
    Result<pki::CertAndKey> ca = pki::MakeCa({});
    EXPECT_TRUE(ca.ok()) << ca.status().ToString();
    Write(name, ca);
    return ca.ok() ? *ca : pki::CertAndKey{};
  }
  void Write(const std::string& name, const Result<pki::CertAndKey>& pair) {
    ASSERT_TRUE(pair.ok()) << pair.status().ToString();
    ASSERT_TRUE(pki::WriteFile(Path(name + ".crt"), pair->cert_pem).ok());
    ASSERT_TRUE(pki::WriteKeyFile(Path(name + ".key"), pair->key_pem).ok());
  }

  std::string dir_;
  pki::CertAndKey ca_;
  pki::CertAndKey other_ca_;
};

class HttpTlsTest : public ::testing::Test {
 protected:
  // Starts a TLS server whose routes answer who the client is.
  void StartServer(ClientCertMode mode = ClientCertMode::kNone,
                   std::chrono::milliseconds handshake_timeout = 10s) {
    ServerOptions options;
    ServerTlsOptions tls;
    tls.cert_chain_file = files_.Path("server.crt");
    tls.key_file = files_.Path("server.key");
    if (mode != ClientCertMode::kNone) tls.client_ca_file = files_.Path("ca.crt");
    tls.client_certs = mode;
    tls.handshake_timeout = handshake_timeout;
    options.tls = tls;
    server_ = std::make_unique<HttpServer>(options);
    ASSERT_TRUE(server_
                    ->Handle(Method::kGet, "/whoami",
                             [](const Request& r) {
                               return Response::Text(200, "[" + r.peer_identity + "] " + r.peer);
                             })
                    .ok());
    ASSERT_TRUE(server_
                    ->Handle(Method::kGet, "/stream",
                             [](const Request&) {
                               return Response::Stream([](std::shared_ptr<StreamWriter> w) {
                                 std::thread([w] {
                                   for (int i = 0; i < 50; ++i) w->Write(std::to_string(i) + "\n");
                                   w->Close();
                                 }).detach();
                               });
                             })
                    .ok());
    Status started = server_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
  }

  ClientOptions Client(const std::string& ca = "ca", const std::string& cert = "") {
    ClientOptions options;
    options.port = server_->port();
    options.connect_timeout = 5s;
    options.read_timeout = 10s;
    ClientTlsOptions tls;
    tls.ca_file = files_.Path(ca + ".crt");
    if (!cert.empty()) {
      tls.cert_file = files_.Path(cert + ".crt");
      tls.key_file = files_.Path(cert + ".key");
    }
    options.tls = tls;
    return options;
  }

  TlsFiles files_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpTlsTest, RequestAndResponseWithoutAClientCertificate) {
  StartServer();
  HttpClient client(Client());
  Result<Response> r = client.Request(Method::kGet, "/whoami");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.substr(0, 3), "[] ");  // no certificate, no identity
}

TEST_F(HttpTlsTest, KeepAliveReusesOneTlsConnection) {
  StartServer();
  HttpClient client(Client());
  std::vector<std::string> peers;
  for (int i = 0; i < 5; ++i) {
    Result<Response> r = client.Request(Method::kGet, "/whoami");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    peers.push_back(r->body);
  }
  // The same client port each time: one connection, one handshake.
  for (const std::string& p : peers) EXPECT_EQ(p, peers.front());
  EXPECT_EQ(server_->connection_count(), 1u);
}

TEST_F(HttpTlsTest, StreamDeliversEveryLineOverTls) {
  StartServer();
  HttpClient client(Client());
  std::vector<std::string> lines;
  Status s = client.Stream(Method::kGet, "/stream", [&](std::string_view line) {
    lines.emplace_back(line);
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(lines.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(lines[static_cast<size_t>(i)], std::to_string(i));
  // A request after the stream (which closed its connection) connects again.
  Result<Response> r = client.Request(Method::kGet, "/whoami");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

TEST_F(HttpTlsTest, ClientWithTheWrongCaRefusesTheServer) {
  StartServer();
  HttpClient client(Client("other-ca"));
  Result<Response> r = client.Request(Method::kGet, "/whoami");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("TLS handshake"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("certificate verify failed"), std::string::npos)
      << r.status().message();
}

TEST_F(HttpTlsTest, ClientRefusesAServerCertificateForAnotherName) {
  StartServer();
  ClientOptions options = Client();
  options.tls->server_name = "head.example";
  HttpClient client(options);
  Result<Response> r = client.Request(Method::kGet, "/whoami");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("head.example"), std::string::npos) << r.status().message();
  // By DNS name, as the certificate carries "localhost" too.
  options = Client();
  options.host = "localhost";
  HttpClient by_name(options);
  Result<Response> ok = by_name.Request(Method::kGet, "/whoami");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST_F(HttpTlsTest, RequiredClientCertificateNamesThePeer) {
  StartServer(ClientCertMode::kRequire);
  HttpClient alice(Client("ca", "alice"));
  Result<Response> r = alice.Request(Method::kGet, "/whoami");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body.substr(0, 13), "[user:alice] ");

  HttpClient anonymous(Client());
  EXPECT_FALSE(anonymous.Request(Method::kGet, "/whoami").ok());

  // A certificate from another CA is refused, whatever name it claims.
  HttpClient mallory(Client("ca", "mallory"));
  EXPECT_FALSE(mallory.Request(Method::kGet, "/whoami").ok());
}

TEST_F(HttpTlsTest, RequestedClientCertificateIsOptionalButMustVerify) {
  StartServer(ClientCertMode::kRequest);
  HttpClient anonymous(Client());
  Result<Response> r = anonymous.Request(Method::kGet, "/whoami");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body.substr(0, 3), "[] ");
  HttpClient alice(Client("ca", "alice"));
  r = alice.Request(Method::kGet, "/whoami");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body.substr(0, 13), "[user:alice] ");
  HttpClient mallory(Client("ca", "mallory"));
  EXPECT_FALSE(mallory.Request(Method::kGet, "/whoami").ok());
}

TEST_F(HttpTlsTest, PlainHttpToATlsPortGetsA400RefusalPromptly) {
  StartServer();
  ClientOptions plain;
  plain.port = server_->port();
  HttpClient client(plain);
  auto start = std::chrono::steady_clock::now();
  Result<Response> r = client.Request(Method::kGet, "/whoami");
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("HTTPS only"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("--ca-file"), std::string::npos) << r->body;
  EXPECT_LT(took, 2s);
}

TEST_F(HttpTlsTest, TlsClientToAPlainServerFailsSayingWhy) {
  HttpServer plain(ServerOptions{});
  ASSERT_TRUE(plain.Start().ok());
  ClientOptions options;
  options.port = plain.port();
  options.tls = ClientTlsOptions{files_.Path("ca.crt"), "", "", ""};
  HttpClient client(options);
  Result<Response> r = client.Request(Method::kGet, "/");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("plain HTTP"), std::string::npos) << r.status().message();
}

TEST_F(HttpTlsTest, ClientThatNeverFinishesItsHandshakeIsDropped) {
  StartServer(ClientCertMode::kNone, 300ms);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server_->port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // The start of a TLS record, then silence.
  const char partial[] = {0x16, 0x03, 0x01};
  ASSERT_EQ(::send(fd, partial, sizeof partial, MSG_NOSIGNAL), 3);
  auto start = std::chrono::steady_clock::now();
  char buf[256];
  ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  auto took = std::chrono::steady_clock::now() - start;
  ::close(fd);
  EXPECT_LE(n, 0);  // closed (or reset), with nothing sent
  EXPECT_LT(took, 5s);
}

TEST_F(HttpTlsTest, FilesThatDoNotLoadAreNamed) {
  ServerOptions options;
  options.tls = ServerTlsOptions{files_.Path("server.crt"), files_.Path("missing.key"), "",
                                 ClientCertMode::kNone, 10s};
  HttpServer server(options);
  Status s = server.Start();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tls.key_file"), std::string::npos) << s.ToString();

  options.tls = ServerTlsOptions{files_.Path("server.crt"), files_.Path("alice.key"), "",
                                 ClientCertMode::kNone, 10s};
  HttpServer mismatched(options);
  s = mismatched.Start();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("must be the key of the certificate"), std::string::npos)
      << s.ToString();

  ClientOptions client_options;
  client_options.port = 1;
  client_options.tls = ClientTlsOptions{files_.Path("missing.crt"), "", "", ""};
  HttpClient client(client_options);
  Result<Response> r = client.Request(Method::kGet, "/");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tls.ca_file"), std::string::npos) << r.status().ToString();
}

TEST(ClientOptionsForUrl, SchemesHostsAndErrors) {
  Result<ClientOptions> https = ClientOptionsForUrl("https://10.0.0.2:7070/", "ca.crt", "--server");
  ASSERT_TRUE(https.ok()) << https.status().ToString();
  EXPECT_EQ(https->host, "10.0.0.2");
  EXPECT_EQ(https->port, 7070);
  ASSERT_TRUE(https->tls.has_value());
  EXPECT_EQ(https->tls->ca_file, "ca.crt");

  Result<ClientOptions> plain = ClientOptionsForUrl("http://[::1]:80", "", "--server");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->host, "::1");
  EXPECT_FALSE(plain->tls.has_value());

  Result<ClientOptions> bare = ClientOptionsForUrl("0.0.0.0:9", "ca.crt", "--server");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->host, "127.0.0.1");
  EXPECT_TRUE(bare->tls.has_value());  // TLS unless http:// says otherwise

  for (const char* wrong :
       {"https://h:0", "https://h:x", "https://h", "ftp://h:1", "https://h:1/p", "https://::1:8"}) {
    Result<ClientOptions> r = ClientOptionsForUrl(wrong, "ca.crt", "--head");
    ASSERT_FALSE(r.ok()) << wrong;
    EXPECT_NE(r.status().message().find("--head"), std::string::npos) << r.status().message();
  }
  Result<ClientOptions> no_ca = ClientOptionsForUrl("https://h:1", "", "--head");
  ASSERT_FALSE(no_ca.ok());
  EXPECT_NE(no_ca.status().message().find("--ca-file"), std::string::npos);
}

}  // namespace
}  // namespace tessera::net
