// remote_servers: the real servers tst_remote reads from, on loopback, started and stopped by the
// test: nginx serving a folder over HTTP (and HTTPS with a self-signed certificate), s3rver (npm)
// as the S3-compatible store, and tests/net/fault_proxy.py in front of each for faults and
// request logs (in front of s3rver it also checks SigV4 signatures, which s3rver does not).
#pragma once

#include <QJsonArray>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>

#include <memory>

namespace stoker::test {

class RemoteServers {
 public:
  // Starts everything under `root`; false with `error` set when a server does not come up.
  bool start(const QString& root, QString* error);
  ~RemoteServers();

  QString www() const { return root_ + "/www"; }  // what nginx serves
  QString httpUrl(const QString& path) const;      // through the HTTP proxy
  QString httpsUrl(const QString& path) const;     // nginx's TLS port, self-signed
  QString certificate() const { return root_ + "/tls/cert.pem"; }
  int s3ProxyPort() const { return s3ProxyPort_; }
  int s3Port() const { return s3Port_; }
  static QString bucket() { return "stoker-test"; }

  // PUTs `file` as s3://stoker-test/KEY (signed, through curl straight to s3rver).
  bool upload(const QString& file, const QString& key, QString* error);
  // POST /__fault to a proxy (http: the HTTP one, else the S3 one).
  bool fault(bool http, const QString& mode, int count, int latencyMs = 0);
  // The requests a proxy forwarded since the last call: [method, path, range, status, bytes,
  // requests in flight when it came] each.
  QJsonArray takeLog(bool http);
  // Kills a proxy (http: the HTTP one, else the S3 one; its port then refuses connections) and
  // starts it again on that port.
  void killProxy(bool http);
  bool restartProxy(bool http, QString* error);

 private:
  bool startProxy(std::unique_ptr<QProcess>& p, int port, int upstream, QString* error, const QStringList& extra = {});
  QString root_;
  std::unique_ptr<QProcess> nginx_, s3rver_, httpProxy_, s3Proxy_;
  int httpPort_ = 0, httpsPort_ = 0, s3Port_ = 0, httpProxyPort_ = 0, s3ProxyPort_ = 0;
};

}  // namespace stoker::test
