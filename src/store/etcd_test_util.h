// EtcdProcess: a real single-member etcd for tests, on ports the kernel picks (port 0), with
// its data in a temporary directory that goes with it. Start() finds the binary ($TESSERA_ETCD,
// else `etcd` on PATH, which scripts/setup.sh installs from Debian's etcd-server); when there
// is none, available() is false and the tests that need it skip with a loud message.
//
// Thread-safety: none; one per test binary (SharedEtcd) or per test.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "store/etcd_client.h"
#include "store/store_test_util.h"

namespace tessera::store {

inline std::string FindEtcdBinary() {
  if (const char* env = std::getenv("TESSERA_ETCD"); env && *env) return env;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = dir + "/etcd";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

class EtcdProcess {
 public:
  EtcdProcess() = default;
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;
  ~EtcdProcess() { Stop(); }

  // Starts etcd and waits (up to 60 s: the machine may be busy) until it answers a read.
  // Returns false with the reason in error() when it cannot. etcd's HTTP gateway dials its
  // own client address, so port 0 cannot be passed: the kernel picks two free ports, and a
  // start that loses one of them to another process is retried on new ones.
  bool Start() {
    binary_ = FindEtcdBinary();
    if (binary_.empty()) {
      error_ =
          "no etcd binary (install Debian's etcd-server: scripts/setup.sh, or set TESSERA_ETCD)";
      return false;
    }
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (StartOnce()) return true;
    }
    return false;
  }

  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // Before Start(): serve client and peer TLS with the member certificate `cert_file` /
  // `key_file` and refuse clients without a certificate signed by `ca_file`
  // (--client-cert-auth); the start probe then speaks TLS as `probe`.
  void UseTls(std::string cert_file, std::string key_file, std::string ca_file, EtcdTls probe) {
    tls_flags_ = {"--cert-file=" + cert_file,         "--key-file=" + key_file,
                  "--trusted-ca-file=" + ca_file,     "--client-cert-auth",
                  "--peer-cert-file=" + cert_file,    "--peer-key-file=" + key_file,
                  "--peer-trusted-ca-file=" + ca_file};
    probe_tls_ = std::move(probe);
  }

  // Restarts a stopped etcd on the same ports and data.
  bool Restart() { return StartOnce(/*same_ports=*/true); }

  int port() const { return port_; }
  std::string url() const { return "etcd://127.0.0.1:" + std::to_string(port_); }
  EtcdEndpoint endpoint() const { return {"127.0.0.1", static_cast<uint16_t>(port_)}; }
  const std::string& error() const { return error_; }
  pid_t pid() const { return pid_; }

 private:
  // A port nothing listens on now: bound by the kernel, then released.
  static int FreePort() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    ::close(fd);
    return port;
  }

  bool StartOnce(bool same_ports = false) {
    if (!same_ports) {
      port_ = FreePort();
      peer_port_ = FreePort();
      std::error_code ec;
      std::filesystem::remove_all(dir_.File("data"), ec);  // a fresh member, no old membership
    }
    log_ = dir_.File("etcd.log");
    pid_ = ::fork();
    if (pid_ < 0) {
      error_ = "fork failed";
      return false;
    }
    if (pid_ == 0) {
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      const std::string scheme = probe_tls_ ? "https://" : "http://";
      const std::string client = scheme + "127.0.0.1:" + std::to_string(port_);
      const std::string peer = scheme + "127.0.0.1:" + std::to_string(peer_port_);
      std::vector<std::string> args = {
          "--data-dir=" + dir_.File("data"), "--name=test",
          "--listen-client-urls=" + client,  "--advertise-client-urls=" + client,
          "--listen-peer-urls=" + peer,      "--initial-advertise-peer-urls=" + peer,
          "--initial-cluster=test=" + peer,  "--max-txn-ops=10000"};
      args.insert(args.end(), tls_flags_.begin(), tls_flags_.end());
      std::vector<char*> argv = {const_cast<char*>(binary_.c_str())};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(binary_.c_str(), argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        error_ = "etcd exited at start; its log: " + ReadLog();
        return false;
      }
      EtcdOptions probe_options;
      probe_options.endpoints = {endpoint()};
      probe_options.tls = probe_tls_;
      EtcdClient probe(probe_options);
      if (probe.Range("probe").ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    error_ = "etcd did not answer within 60 s; its log: " + ReadLog();
    Stop();
    return false;
  }

  std::string ReadLog() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  ScopedTempDir dir_;
  std::string binary_, log_, error_;
  pid_t pid_ = -1;
  int port_ = 0, peer_port_ = 0;
  std::vector<std::string> tls_flags_;
  std::optional<EtcdTls> probe_tls_;
};

// One etcd for a whole test binary, started on first use and stopped at exit. Each test
// works under its own key prefix (UniquePrefix), so tests do not see each other.
class SharedEtcd {
 public:
  // nullptr when etcd cannot run here; the reason is printed once, loudly.
  static EtcdProcess* Get() {
    static EtcdProcess* process = [] {
      auto* p = new EtcdProcess();
      if (!p->Start()) {
        std::cerr << "\n*** SKIPPING ETCD TESTS: " << p->error() << " ***\n\n";
        delete p;
        return static_cast<EtcdProcess*>(nullptr);
      }
      // Stopped, and its data directory removed, when the test binary exits.
      std::atexit([] { delete Get(); });
      return p;
    }();
    return process;
  }

  static std::string UniquePrefix(const std::string& what) {
    static int counter = 0;
    return "/test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + "-" + what +
           "/";
  }
};

}  // namespace tessera::store
