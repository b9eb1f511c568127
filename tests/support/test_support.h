// test_support: small helpers shared by the Qt Test suites -- temporary
// files, hand-built safetensors bytes, running the CLI and Debian's python3.
#pragma once

#include <QByteArray>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QTemporaryDir>

#include <cstdint>
#include <string>

namespace stoker::test {

// Writes `bytes` to `path`; QVERIFY-friendly (returns false on failure).
bool writeFile(const QString& path, const QByteArray& bytes);
QByteArray readFile(const QString& path);

// 8-byte little-endian length + header + data: a safetensors file as raw bytes.
QByteArray safetensorsBytes(const QByteArray& header, const QByteArray& data);

struct ProcessResult {
  int exitCode = -1;
  bool crashed = false;
  QByteArray out, err;
  qint64 elapsedMs = 0;
};

// Runs a program to completion (timeout 120 s) and captures its output;
// `env` adds or overrides NAME=VALUE variables of this process's environment.
ProcessResult run(const QString& program, const QStringList& args, const QByteArray& stdinData = {},
                  const QStringList& env = {});
// The `stoker` CLI built alongside the tests.
ProcessResult runStoker(const QStringList& args, const QStringList& env = {});
// Debian's python3 (the one with python3-torch), running `script`.
ProcessResult runPython(const QString& script, const QStringList& args = {});
// Debian's python3 with these arguments (a script's path and its arguments, or "-c", code, ...).
ProcessResult runPythonArgs(const QStringList& args);
// Whether Debian's python3 can import torch (the set-up installs it).
bool pythonTorchAvailable();

// Every rank's indices from torch's DistributedSampler after set_epoch, for
// each case (n, world, drop_last, shuffle, seed, epoch, extra columns
// ignored): result[case][rank]
// is a list of indices. Empty (and `error` set) when python fails.
QByteArray torchDistributedIndices(const QList<QList<qint64>>& cases, QByteArray* error);

QString samplesDir();  // the official safetensors sample files

// A loopback port nobody listens on now (the kernel's pick for a throwaway socket).
int freePort();
// A blocking TCP connection to 127.0.0.1:port, as a hostile or silent client makes it; -1 on failure.
int connectToLoopback(int port);
// torchvision's FashionMNIST reads ROOT/FashionMNIST/raw/*-ubyte; Debian's dataset-fashion-mnist
// ships them gzipped: unpacks them there. False when they are not installed.
bool unpackFashionMnist(const QString& root);

}  // namespace stoker::test
