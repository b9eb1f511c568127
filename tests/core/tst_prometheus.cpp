// The Prometheus exporter (DESIGN.md "Prometheus"): its text passes `promtool check metrics`,
// unknown figures and stale series are left out, label values are escaped; `stoker monitor
// --prometheus` serves what it receives, a publisher's prometheus: target serves its own
// process's figures, and Debian's real Prometheus server scrapes the endpoint and answers a query
// for a series with the right rank label.
#include <QtTest>

#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>

#include <httplib.h>

#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include "telemetry/metrics_http_server.h"
#include "telemetry/prometheus_exporter.h"
#include "telemetry/telemetry_publisher.h"
#include "test_support.h"
#include "util/error.h"

using namespace stoker;

namespace {

TelemetryRecord record(int rank, double waitMs, double stepMs) {
  TelemetryRecord r;
  r.time = 1.7e9 + rank;
  r.host = "node-a";
  r.pid = 100 + rank;
  r.rank = rank;
  r.device = "cuda:" + std::to_string(rank % 8);
  r.epoch = 2;
  r.step = 40 + rank;
  r.steps_total = 100;
  r.samples_per_s = 1000.0 * (rank + 1);
  r.data_wait_ms = waitMs;
  r.step_ms = stepMs;
  r.mode = "streaming";
  return r;
}

bool promtoolAvailable() { return QFile::exists("/usr/bin/promtool"); }

// `promtool check metrics` reads the exposition on stdin; it exits 0 when the text is valid and
// free of lint problems.
test::ProcessResult promtool(const std::string& text) {
  return test::run("/usr/bin/promtool", {"check", "metrics"}, QByteArray::fromStdString(text));
}

std::string scrape(int port, int* status = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5);
  c.set_read_timeout(5);
  const auto res = c.Get("/metrics");
  if (status) *status = res ? res->status : -1;
  return res ? res->body : std::string();
}

bool hasLine(const std::string& text, const std::string& prefix) {
  return text.find("\n" + prefix) != std::string::npos || text.rfind(prefix, 0) == 0;
}

}  // namespace

class TestPrometheus : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void exposition() {
    PrometheusExporter e(60);
    QVERIFY(e.render().find("# TYPE stoker_samples_per_second gauge") != std::string::npos);  // before any record
    TelemetryRecord full = record(0, 2, 18);
    full.bytes_per_s = 5e8;
    full.batch_latency_p50_ms = 3;
    full.batch_latency_p99_ms = 9;
    full.prefetch_depth = 8;
    full.ready = 3;
    full.mem_used = 1LL << 33;
    full.mem_reserved = 1LL << 32;
    full.mem_allocated = 1LL << 31;
    full.mem_total = 80LL << 30;
    full.stages_ms = {{"read", 0.5}, {"decode", 7.25}};
    full.dropped = 4;
    full.net_requests = 1200;
    full.net_bytes = 3LL << 30;
    full.net_retries = 2;
    full.time = 1.7e9;
    e.onRecord(full);
    TelemetryRecord lean = record(1, 9, 1);  // a probe: no bytes, no latency, no memory
    lean.host = "node \"b\"\\\nx";          // label values are escaped, never break a line
    lean.loader = "train.py:42";
    e.onRecord(lean);
    const std::string text = e.render();
    const std::string r0 = "{rank=\"0\",device=\"cuda:0\",host=\"node-a\"";
    QVERIFY(hasLine(text, "stoker_samples_per_second" + r0 + "} 1000\n"));
    QVERIFY(hasLine(text, "stoker_data_wait_ratio" + r0 + "} 0.1\n"));
    QVERIFY(hasLine(text, "stoker_step_seconds" + r0 + "} 0.018\n"));
    QVERIFY(hasLine(text, "stoker_stage_seconds" + r0 + ",stage=\"decode\"} 0.00725\n"));
    QVERIFY(hasLine(text, "stoker_device_memory_bytes" + r0 + ",kind=\"total\"} 85899345920\n"));
    QVERIFY(hasLine(text, "stoker_records_dropped_total" + r0 + "} 4\n"));
    QVERIFY(hasLine(text, "stoker_net_requests_total" + r0 + "} 1200\n"));
    QVERIFY(hasLine(text, "stoker_net_received_bytes_total" + r0 + "} 3221225472\n"));
    QVERIFY(hasLine(text, "stoker_net_retries_total" + r0 + "} 2\n"));
    QVERIFY(hasLine(text, "stoker_last_record_timestamp_seconds" + r0 + "} 1.7e+09\n"));
    const std::string r1 = "{rank=\"1\",device=\"cuda:1\",host=\"node \\\"b\\\"\\\\\\nx\",loader=\"train.py:42\"";
    QVERIFY2(hasLine(text, "stoker_data_wait_ratio" + r1 + "} 0.9\n"), text.c_str());
    // Unknown figures have no sample at all (never a 0).
    for (const char* absent : {"stoker_bytes_per_second", "stoker_device_memory_bytes", "stoker_stage_seconds",
                               "stoker_batch_latency_seconds", "stoker_ready_batches", "stoker_records_dropped_total",
                               "stoker_net_requests_total", "stoker_net_retries_total"})
      QVERIFY2(!hasLine(text, absent + r1), absent);
    if (promtoolAvailable()) {
      const auto check = promtool(text);
      QVERIFY2(check.exitCode == 0, (check.out + check.err).constData());
    }
    // A series silent for longer than the stale limit is left out.
    const std::string later = e.render(1e11);
    QVERIFY(later.find("rank=\"0\"") == std::string::npos);
    QCOMPARE(e.seriesCount(), std::size_t(2));
  }

  // A peer inventing host names cannot grow the exporter past its cap; stale series make room.
  void seriesAreCapped() {
    PrometheusExporter e(60);
    for (std::size_t i = 0; i < PrometheusExporter::kMaxSeries + 50; ++i) {
      TelemetryRecord r = record(0, 1, 9);
      r.host = "made-up-" + std::to_string(i);
      e.onRecord(r);
    }
    QCOMPARE(e.seriesCount(), PrometheusExporter::kMaxSeries);
    QCOMPARE(e.refusedSeries(), std::int64_t(50));
    PrometheusExporter stale(-1);  // everything is stale at once: old series give way to new ones
    for (std::size_t i = 0; i < PrometheusExporter::kMaxSeries + 50; ++i) {
      TelemetryRecord r = record(0, 1, 9);
      r.host = "made-up-" + std::to_string(i);
      stale.onRecord(r);
    }
    QVERIFY(stale.seriesCount() < PrometheusExporter::kMaxSeries);
    QCOMPARE(stale.refusedSeries(), std::int64_t(0));
  }

  void promtoolRejectsWhatItShould() {
    if (!promtoolAvailable()) QSKIP("prometheus (promtool) is not installed (the set-up installs it)");
    // The check is not a rubber stamp: a broken exposition fails it.
    QVERIFY(promtool("stoker_x{rank=\"0\" 1\n").exitCode != 0);
  }

  // A publisher's prometheus: target serves its own process's figures; port 0 picks one.
  void publisherServesItsOwnFigures() {
    TelemetryPublisher p({"prometheus:127.0.0.1:0"});
    const int port = p.listeningPort(0);
    QVERIFY(port > 0);
    p.onRecord(record(3, 1, 9));
    int status = 0;
    const std::string text = scrape(port, &status);
    QCOMPARE(status, 200);
    QVERIFY2(text.find("stoker_samples_per_second{rank=\"3\",device=\"cuda:3\",host=\"node-a\"} 4000") !=
                 std::string::npos,
             text.c_str());
    httplib::Client c("127.0.0.1", port);
    const auto missing = c.Get("/nothing");
    QVERIFY(missing && missing->status == 404);
  }

  // Clients that hold connections, trickle or send without end: scrapes are still served at once,
  // memory stays bounded, and the endpoint closes at once with them connected. (cpp-httplib's
  // server read a chunked body without bound, and two trickling clients held both its threads.)
  void hostileClientsDoNotStopScrapes() {
    auto server = std::make_unique<MetricsHttpServer>("127.0.0.1:0", [] { return std::string("stoker_up 1\n"); });
    const int port = server->port();
    auto connectTo = [port] { return test::connectToLoopback(port); };
    std::vector<int> held;
    for (int i = 0; i < 100; ++i) {  // more than the 64 it keeps: silent, or a byte of a request line
      held.push_back(connectTo());
      QVERIFY(held.back() >= 0);
      if (i % 2) QCOMPARE(::send(held.back(), "G", 1, MSG_NOSIGNAL), ssize_t(1));
    }
    // A chunked POST that never ends, and a header line that never ends: 431 after 8 KiB, closed.
    const int chunked = connectTo(), endless = connectTo();
    const std::string head = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    QCOMPARE(::send(chunked, head.data(), head.size(), MSG_NOSIGNAL), ssize_t(head.size()));
    const std::string chunk = "1000\r\n" + std::string(4096, 'x') + "\r\n";
    const std::string line = "GET /metrics HTTP/1.1\r\nX-Long: " + std::string(64 * 1024, 'y');
    ::send(endless, line.data(), line.size(), MSG_NOSIGNAL);
    for (int i = 0; i < 256; ++i)
      if (::send(chunked, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) break;  // 1 MiB, or until refused
    QElapsedTimer clock;
    clock.start();
    int status = 0;
    QCOMPARE(scrape(port, &status), std::string("stoker_up 1\n"));
    QCOMPARE(status, 200);
    QVERIFY2(clock.elapsed() < 2000, qPrintable(QString::number(clock.elapsed())));
    char answer[64] = {};
    ::recv(endless, answer, sizeof answer - 1, 0);
    QVERIFY2(std::string(answer).rfind("HTTP/1.1 431", 0) == 0, answer);
    clock.restart();
    server.reset();  // with every client still connected
    QVERIFY2(clock.elapsed() < 1000, qPrintable(QString::number(clock.elapsed())));
    for (int fd : held) ::close(fd);
    ::close(chunked);
    ::close(endless);
  }

  void endpointErrors() {
    for (const char* bad : {"nonsense", "127.0.0.1:99999", "[::1:80"}) {
      try {
        MetricsHttpServer s(bad, [] { return std::string(); });
        QFAIL(bad);
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
      }
    }
    MetricsHttpServer first("127.0.0.1:0", [] { return std::string(); });
    try {
      MetricsHttpServer second("127.0.0.1:" + std::to_string(first.port()), [] { return std::string(); });
      QFAIL("two endpoints on one port");
    } catch (const Error& e) {
      QCOMPARE(e.kind(), ErrorKind::Io);
    }
    const auto r = test::runStoker({"monitor", ":0", "--prometheus", "nonsense", "--duration", "1"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.startsWith("error: address nonsense: ") && r.err.count('\n') == 1, r.err.constData());
  }

  // `stoker monitor --prometheus` aggregates what ranks send; Debian's Prometheus scrapes it and its
  // query API returns the series of rank 1 with its labels.
  void realPrometheusScrapesTheMonitor() {
    // The monitor picks both ports and says them on stderr (two free ports picked here could be
    // the same one).
    QProcess monitor;
    monitor.start(STOKER_CLI_PATH, {"monitor", "127.0.0.1:0", "--prometheus", "127.0.0.1:0", "--duration", "120"});
    QVERIFY(monitor.waitForStarted(10000));
    int listen = 0, metrics = 0;
    QByteArray said;
    for (int i = 0; i < 100 && (listen == 0 || metrics == 0); ++i) {
      monitor.waitForReadyRead(100);
      said += monitor.readAllStandardError();
      const QRegularExpressionMatch l = QRegularExpression("listening on port (\\d+)").match(said);
      const QRegularExpressionMatch m = QRegularExpression("Prometheus metrics on port (\\d+)").match(said);
      if (l.hasMatch()) listen = l.captured(1).toInt();
      if (m.hasMatch()) metrics = m.captured(1).toInt();
    }
    QVERIFY2(listen > 0 && metrics > 0, said.constData());
    const int web = test::freePort();
    TelemetryPublisher ranks({"127.0.0.1:" + std::to_string(listen)});
    std::string text;
    for (int i = 0; i < 100 && text.find("rank=\"1\"") == std::string::npos; ++i) {
      ranks.onRecord(record(0, 1, 20));
      ranks.onRecord(record(1, 30, 10));
      QTest::qWait(100);
      text = scrape(metrics);
    }
    QVERIFY2(text.find("stoker_data_wait_ratio{rank=\"1\",device=\"cuda:1\",host=\"node-a\"} 0.75") != std::string::npos,
             text.c_str());
    if (promtoolAvailable()) {
      const auto check = promtool(text);
      QVERIFY2(check.exitCode == 0, (check.out + check.err).constData());
    }
    if (!QFile::exists("/usr/bin/prometheus")) QSKIP("prometheus is not installed (the set-up installs it)");
    QTemporaryDir dir;
    QVERIFY(test::writeFile(dir.filePath("prometheus.yml"),
                            QString("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: stoker\n"
                                    "    static_configs:\n      - targets: ['127.0.0.1:%1']\n")
                                .arg(metrics)
                                .toUtf8()));
    QProcess server;
    server.setProcessChannelMode(QProcess::MergedChannels);
    server.start("/usr/bin/prometheus", {"--config.file=" + dir.filePath("prometheus.yml"),
                                         "--storage.tsdb.path=" + dir.filePath("data"),
                                         QString("--web.listen-address=127.0.0.1:%1").arg(web)});
    QVERIFY(server.waitForStarted(10000));
    httplib::Client api("127.0.0.1", web);
    api.set_connection_timeout(2);
    QJsonObject sample;
    for (int i = 0; i < 300 && sample.isEmpty(); ++i) {
      ranks.onRecord(record(0, 1, 20));
      ranks.onRecord(record(1, 30, 10));
      const auto res = api.Get("/api/v1/query?query=" + httplib::detail::encode_query_param("stoker_data_wait_ratio{rank=\"1\"}"));
      if (res && res->status == 200) {
        const QJsonArray result = QJsonDocument::fromJson(QByteArray::fromStdString(res->body))
                                      .object()["data"].toObject()["result"].toArray();
        if (!result.isEmpty()) sample = result[0].toObject();
      }
      if (sample.isEmpty()) QTest::qWait(100);
    }
    server.terminate();
    server.waitForFinished(10000);
    // processId() is 0 once it has exited, and kill(0, ...) would signal this whole process group.
    if (const qint64 pid = monitor.processId(); pid > 0 && monitor.state() == QProcess::Running)
      ::kill(static_cast<pid_t>(pid), SIGINT);
    monitor.waitForFinished(10000);
    QVERIFY2(!sample.isEmpty(), server.readAll().right(2000).constData());
    const QJsonObject labels = sample["metric"].toObject();
    QCOMPARE(labels["__name__"].toString(), QString("stoker_data_wait_ratio"));
    QCOMPARE(labels["rank"].toString(), QString("1"));
    QCOMPARE(labels["device"].toString(), QString("cuda:1"));
    QCOMPARE(labels["host"].toString(), QString("node-a"));
    QCOMPARE(labels["job"].toString(), QString("stoker"));
    QCOMPARE(sample["value"].toArray()[1].toString(), QString("0.75"));
  }
};

QTEST_GUILESS_MAIN(TestPrometheus)
#include "tst_prometheus.moc"
