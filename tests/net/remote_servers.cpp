#include "remote_servers.h"

#include <QUrl>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QThread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>

#include "test_support.h"

namespace stoker::test {
namespace {

bool waitForPort(int port, int ms) {
  QElapsedTimer t;
  t.start();
  while (t.elapsed() < ms) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (up) return true;
    QThread::msleep(50);
  }
  return false;
}

// An exchange with a proxy's control endpoints (curl: Core tests link no Qt Network).
QByteArray control(int port, const QString& path, const QByteArray& postBody = {}) {
  QStringList args{"-sS", "--fail", QString("http://127.0.0.1:%1%2").arg(port).arg(path)};
  if (!postBody.isNull()) args << "--data-binary" << QString::fromUtf8(postBody);
  const auto r = run("curl", args);
  return r.exitCode == 0 ? r.out : QByteArray();
}

// The servers die with the test, even when it aborts (their stderr is the test's: a survivor would
// keep CTest waiting on the pipe).
void dieWithParent(QProcess& p) {
  p.setChildProcessModifier([] { ::prctl(PR_SET_PDEATHSIG, SIGKILL); });
  p.setProcessChannelMode(QProcess::ForwardedErrorChannel);
}

}  // namespace

bool RemoteServers::start(const QString& root, QString* error) {
  root_ = root;
  QDir().mkpath(www());
  // nginx's worker may run as nobody: the folders it serves from must be open to it.
  for (QString dir = root; dir.count('/') > 1; dir = QFileInfo(dir).path())
    if (dir.startsWith(QDir::tempPath() + "/")) QFile::setPermissions(dir, QFile::permissions(dir) | QFile::ExeOther | QFile::ReadOther);
  QDir().mkpath(root + "/s3");
  QDir().mkpath(root + "/tls");
  QDir().mkpath(root + "/nginx/tmp");
  // A self-signed certificate for 127.0.0.1: what a TLS client must refuse unless told to trust it.
  const auto cert = run("openssl", {"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", root + "/tls/key.pem", "-out", certificate()});
  if (cert.exitCode != 0) return *error = "openssl: " + QString::fromUtf8(cert.err), false;
  httpPort_ = freePort();
  httpsPort_ = freePort();
  while (httpsPort_ == httpPort_) httpsPort_ = freePort();
  const QString conf = QString(R"(daemon off;
master_process off;
pid %1/nginx/nginx.pid;
error_log %1/nginx/error.log;
events { worker_connections 512; }
http {
  access_log off;
  client_body_temp_path %1/nginx/tmp; proxy_temp_path %1/nginx/tmp; fastcgi_temp_path %1/nginx/tmp;
  uwsgi_temp_path %1/nginx/tmp; scgi_temp_path %1/nginx/tmp;
  keepalive_requests 100000;
  server { listen 127.0.0.1:%2; root %1/www; }
  server { listen 127.0.0.1:%3 ssl; root %1/www; ssl_certificate %1/tls/cert.pem; ssl_certificate_key %1/tls/key.pem; }
}
)")
                           .arg(root)
                           .arg(httpPort_)
                           .arg(httpsPort_);
  if (!writeFile(root + "/nginx/nginx.conf", conf.toUtf8())) return *error = "cannot write nginx.conf", false;
  nginx_ = std::make_unique<QProcess>();
  dieWithParent(*nginx_);
  nginx_->start("/usr/sbin/nginx", {"-c", root + "/nginx/nginx.conf", "-p", root + "/nginx"});
  if (!nginx_->waitForStarted(5000) || !waitForPort(httpPort_, 10000))
    return *error = "nginx did not start (apt-get install nginx-light)", false;

  const QString s3rver = QStringLiteral(STOKER_TEST_TOOLS "/node_modules/s3rver/bin/s3rver.js");
  if (!QFile::exists(s3rver))
    return *error = s3rver + " is missing: bash packaging/stoker.sh test installs it (npm install s3rver)", false;
  s3Port_ = freePort();
  s3rver_ = std::make_unique<QProcess>();
  dieWithParent(*s3rver_);
  s3rver_->setStandardOutputFile(QProcess::nullDevice());
  // --openssl-legacy-provider: s3rver 3.7's continuation tokens use a cipher Node 20's OpenSSL 3
  // keeps behind it (without it every truncated listing is a 500).
  s3rver_->start("node", {"--openssl-legacy-provider", s3rver, "-d", root + "/s3", "-a", "127.0.0.1", "-p", QString::number(s3Port_), "--silent",
                          "--configure-bucket", bucket()});
  if (!s3rver_->waitForStarted(5000) || !waitForPort(s3Port_, 20000)) return *error = "s3rver did not start", false;
  httpProxyPort_ = freePort();
  if (!startProxy(httpProxy_, httpProxyPort_, httpPort_, error)) return false;
  s3ProxyPort_ = freePort();
  return restartProxy(false, error);
}

bool RemoteServers::startProxy(std::unique_ptr<QProcess>& p, int port, int upstream, QString* error, const QStringList& extra) {
  p = std::make_unique<QProcess>();
  dieWithParent(*p);
  p->start(STOKER_PYTHON, QStringList{QStringLiteral(STOKER_SOURCE_DIR "/tests/net/fault_proxy.py"), QString::number(port),
                                      QString::number(upstream)} + extra);
  if (!p->waitForStarted(5000) || !waitForPort(port, 10000)) return *error = "fault_proxy.py did not start", false;
  return true;
}

RemoteServers::~RemoteServers() {
  for (auto* p : {httpProxy_.get(), s3Proxy_.get(), s3rver_.get(), nginx_.get()}) {
    if (!p || p->state() == QProcess::NotRunning) continue;
    p->terminate();  // nginx: SIGTERM is a fast shutdown
    if (!p->waitForFinished(3000)) {
      p->kill();
      p->waitForFinished(3000);
    }
  }
}

QString RemoteServers::httpUrl(const QString& path) const {
  return QString("http://127.0.0.1:%1/%2").arg(httpProxyPort_).arg(path);
}

QString RemoteServers::httpsUrl(const QString& path) const {
  return QString("https://127.0.0.1:%1/%2").arg(httpsPort_).arg(path);
}

bool RemoteServers::upload(const QString& file, const QString& key, QString* error) {
  const auto sha = run("sha256sum", {file});
  const QString hash = QString::fromUtf8(sha.out).section(' ', 0, 0);
  const auto r = run("curl", {"-sS", "--fail", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "S3RVER:S3RVER", "-H",
                              "x-amz-content-sha256: " + hash, "-T", file,
                              QString("http://127.0.0.1:%1/%2/%3").arg(s3Port_).arg(bucket(), QString::fromLatin1(QUrl::toPercentEncoding(key, "/")))});
  if (r.exitCode != 0) *error = "upload " + key + ": " + QString::fromUtf8(r.err);
  return r.exitCode == 0;
}

bool RemoteServers::fault(bool http, const QString& mode, int count, int latencyMs) {
  const QByteArray body = QJsonDocument(QJsonObject{{"mode", mode}, {"count", count}, {"latency_ms", latencyMs}}).toJson(QJsonDocument::Compact);
  return control(http ? httpProxyPort_ : s3ProxyPort_, "/__fault", body) == "ok";
}

QJsonArray RemoteServers::takeLog(bool http) {
  const QByteArray lines = control(http ? httpProxyPort_ : s3ProxyPort_, "/__log");
  QJsonArray out;
  for (const QByteArray& line : lines.split('\n'))
    if (!line.isEmpty()) out.append(QJsonDocument::fromJson(line).array());
  return out;
}

void RemoteServers::killProxy(bool http) {
  QProcess& p = http ? *httpProxy_ : *s3Proxy_;
  p.kill();
  p.waitForFinished(3000);
}

bool RemoteServers::restartProxy(bool http, QString* error) {
  if (http) return startProxy(httpProxy_, httpProxyPort_, httpPort_, error);
  // The S3 proxy checks every signature made with s3rver's key pair as S3 would (s3rver does not).
  return startProxy(s3Proxy_, s3ProxyPort_, s3Port_, error, {"--sigv4", "S3RVER:S3RVER"});
}

}  // namespace stoker::test
