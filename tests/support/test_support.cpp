#include "test_support.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

namespace stoker::test {

bool writeFile(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return false;
  return f.write(bytes) == bytes.size();
}

QByteArray readFile(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

QByteArray safetensorsBytes(const QByteArray& header, const QByteArray& data) {
  QByteArray out(8, '\0');
  quint64 n = static_cast<quint64>(header.size());
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

ProcessResult run(const QString& program, const QStringList& args, const QByteArray& stdinData,
                  const QStringList& env) {
  ProcessResult r;
  QProcess p;
  if (!env.isEmpty()) {
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    for (const auto& kv : env) e.insert(kv.section('=', 0, 0), kv.section('=', 1));
    p.setProcessEnvironment(e);
  }
  QElapsedTimer timer;
  timer.start();
  p.start(program, args);
  if (!p.waitForStarted(10000)) {
    r.err = "cannot start " + program.toUtf8();
    return r;
  }
  if (!stdinData.isEmpty()) p.write(stdinData);
  p.closeWriteChannel();
  p.waitForFinished(120000);
  r.elapsedMs = timer.elapsed();
  r.crashed = p.exitStatus() == QProcess::CrashExit;
  r.exitCode = p.exitCode();
  r.out = p.readAllStandardOutput();
  r.err = p.readAllStandardError();
  return r;
}

ProcessResult runStoker(const QStringList& args, const QStringList& env) {
  return run(QStringLiteral(STOKER_CLI_PATH), args, {}, env);
}

ProcessResult runPython(const QString& script, const QStringList& args) {
  return run(QStringLiteral(STOKER_PYTHON), QStringList{"-c", script} + args);
}

ProcessResult runPythonArgs(const QStringList& args) { return run(QStringLiteral(STOKER_PYTHON), args); }

bool pythonTorchAvailable() {
  static int cached = -1;
  if (cached < 0) cached = runPython("import torch, numpy").exitCode == 0 ? 1 : 0;
  return cached == 1;
}

QByteArray torchDistributedIndices(const QList<QList<qint64>>& cases, QByteArray* error) {
  QByteArray spec = "[";
  for (const auto& c : cases) {
    QStringList fields;
    for (auto v : c) fields << QString::number(v);
    spec += (spec.size() > 1 ? "," : "") + ("[" + fields.join(',') + "]").toUtf8();
  }
  spec += "]";
  const QString script = R"(
import json, sys
from torch.utils.data import DistributedSampler
out = []
for case in json.loads(sys.argv[1]):
    n, world, drop, shuffle, seed, epoch = case[:6]
    ranks = []
    for r in range(world):
        s = DistributedSampler(range(n), num_replicas=world, rank=r, shuffle=bool(shuffle), seed=seed, drop_last=bool(drop))
        s.set_epoch(epoch)
        ranks.append(list(s))
    out.append(ranks)
print(json.dumps(out))
)";
  const ProcessResult r = runPython(script, {QString::fromUtf8(spec)});
  if (r.exitCode != 0) {
    if (error) *error = r.err;
    return {};
  }
  return r.out;
}

QString samplesDir() { return QStringLiteral(STOKER_TEST_DATA "/safetensors-samples"); }

int freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

int connectToLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

bool unpackFashionMnist(const QString& root) {
  const QString raw = root + "/FashionMNIST/raw";
  if (!QDir().mkpath(raw)) return false;
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    gzFile in = gzopen(QString("/usr/share/datasets/fashion-mnist/%1.gz").arg(name).toLocal8Bit().constData(), "rb");
    if (!in) return false;
    QFile out(raw + "/" + name);
    if (!out.open(QIODevice::WriteOnly)) {
      gzclose(in);
      return false;
    }
    char buf[1 << 16];
    for (int n; (n = gzread(in, buf, sizeof buf)) > 0;) out.write(buf, n);
    gzclose(in);
  }
  return true;
}

}  // namespace stoker::test
