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

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

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
    const std::string r0 = "{rank=\"0\",device=\"cuda:0\",host=\"node-a\",pid=\"100\"";
    const std::string process0 = "{rank=\"0\",host=\"node-a\",pid=\"100\"";  // the process's own counters
    QVERIFY(hasLine(text, "stoker_samples_per_second" + r0 + "} 1000\n"));
    QVERIFY(hasLine(text, "stoker_data_wait_ratio" + r0 + "} 0.1\n"));
    QVERIFY(hasLine(text, "stoker_step_seconds" + r0 + "} 0.018\n"));
    QVERIFY(hasLine(text, "stoker_stage_seconds" + r0 + ",stage=\"decode\"} 0.00725\n"));
    QVERIFY(hasLine(text, "stoker_device_memory_bytes" + r0 + ",kind=\"total\"} 85899345920\n"));
    QVERIFY(hasLine(text, "stoker_records_dropped_total" + process0 + "} 4\n"));
    QVERIFY(hasLine(text, "stoker_net_requests_total" + process0 + "} 1200\n"));
    QVERIFY(hasLine(text, "stoker_net_received_bytes_total" + process0 + "} 3221225472\n"));
    QVERIFY(hasLine(text, "stoker_net_retries_total" + process0 + "} 2\n"));
    QVERIFY(!hasLine(text, "stoker_net_requests_total" + r0));  // not once a device as well
    QVERIFY(hasLine(text, "stoker_last_record_timestamp_seconds" + r0 + "} 1.7e+09\n"));
    const std::string r1 = "{rank=\"1\",device=\"cuda:1\",host=\"node \\\"b\\\"\\\\\\nx\",pid=\"101\",loader=\"train.py:42\"";
    QVERIFY2(hasLine(text, "stoker_data_wait_ratio" + r1 + "} 0.9\n"), text.c_str());
    // Unknown figures have no sample at all (never a 0).
    for (const char* absent : {"stoker_bytes_per_second", "stoker_device_memory_bytes", "stoker_stage_seconds",
                               "stoker_batch_latency_seconds", "stoker_ready_batches", "stoker_records_dropped_total",
                               "stoker_net_requests_total", "stoker_net_retries_total"})
      QVERIFY2(!hasLine(text, absent + r1) && !hasLine(text, absent + std::string("{rank=\"1\",host")), absent);
    if (promtoolAvailable()) {
      const auto check = promtool(text);
      QVERIFY2(check.exitCode == 0, (check.out + check.err).constData());
    }
    // A series silent for longer than the stale limit is left out.
    const std::string later = e.render(1e9);
    QVERIFY(later.find("rank=\"0\"") == std::string::npos);
    QCOMPARE(e.seriesCount(), std::size_t(2));
  }

  // Two processes on one host with the same rank, device and loader (two single-GPU experiments,
  // two `stoker bench` runs) are two series: in one, its counters jumped back and forth between
  // the two, and rate() read every drop as a reset. A process's own counters (its remote requests,
  // its dropped records) are one series a process, so sum() over a job counts each process once
  // however many devices it reports. Series refused at the cap are counted where a scrape sees it.
  void eachProcessIsItsOwnSeries() {
    PrometheusExporter e;
    TelemetryRecord a = record(0, 1, 9), b = record(0, 1, 9), a1 = record(0, 1, 9);
    a.pid = 100, b.pid = 200, a1.pid = 100;
    a1.device = "cuda:1";  // the first process's second device
    a.net_requests = 1200, a1.net_requests = 1300, b.net_requests = 7;
    b.samples_per_s = 5;
    for (const TelemetryRecord& r : {a, a1, b}) e.onRecord(r);
    const std::string text = e.render();
    QVERIFY2(hasLine(text, "stoker_samples_per_second{rank=\"0\",device=\"cuda:0\",host=\"node-a\",pid=\"100\"} 1000\n"), text.c_str());
    QVERIFY(hasLine(text, "stoker_samples_per_second{rank=\"0\",device=\"cuda:0\",host=\"node-a\",pid=\"200\"} 5\n"));
    QVERIFY(hasLine(text, "stoker_samples_per_second{rank=\"0\",device=\"cuda:1\",host=\"node-a\",pid=\"100\"} 1000\n"));
    QVERIFY(hasLine(text, "stoker_net_requests_total{rank=\"0\",host=\"node-a\",pid=\"100\"} 1300\n"));  // its latest
    QVERIFY(hasLine(text, "stoker_net_requests_total{rank=\"0\",host=\"node-a\",pid=\"200\"} 7\n"));
    QCOMPARE(QString::fromStdString(text).count("stoker_net_requests_total{"), 2);
    QVERIFY(hasLine(text, "stoker_series_refused_total 0\n"));
    if (promtoolAvailable()) {
      const auto check = promtool(text);
      QVERIFY2(check.exitCode == 0, (check.out + check.err).constData());
    }
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
    QVERIFY(hasLine(e.render(), "stoker_series_refused_total 50\n"));
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
    QVERIFY2(text.find("stoker_samples_per_second{rank=\"3\",device=\"cuda:3\",host=\"node-a\",pid=\"103\"} 4000") !=
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

  // ":PORT" serves IPv4 and IPv6 (getaddrinfo's first answer, 0.0.0.0, was all it bound: an
  // IPv6-only scraper was refused), and a request whose lines end in a bare LF is answered
  // (it waited for CRLF CRLF until the 5 s deadline closed it without a status line).
  void anyInterfaceServesBothFamilies() {
    MetricsHttpServer any(":0", [] { return std::string("stoker_x 1\n"); });
    const auto get = [&](int family, const std::string& request) {
      const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return std::string("no socket");
      timeval fiveS{5, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &fiveS, sizeof fiveS);
      sockaddr_storage to{};
      socklen_t len = 0;
      if (family == AF_INET) {
        auto* a = reinterpret_cast<sockaddr_in*>(&to);
        a->sin_family = AF_INET;
        a->sin_port = htons(static_cast<std::uint16_t>(any.port()));
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof *a;
      } else {
        auto* a = reinterpret_cast<sockaddr_in6*>(&to);
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(static_cast<std::uint16_t>(any.port()));
        a->sin6_addr = in6addr_loopback;
        len = sizeof *a;
      }
      std::string reply;
      if (::connect(fd, reinterpret_cast<sockaddr*>(&to), len) == 0 &&
          ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
        char buffer[4096];
        for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) reply.append(buffer, static_cast<std::size_t>(n));
      } else {
        reply = std::string("connect: ") + std::strerror(errno);
      }
      ::close(fd);
      return reply;
    };
    std::string r = get(AF_INET, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    QVERIFY2(r.find(" 200 OK") != std::string::npos && r.find("stoker_x 1") != std::string::npos, r.c_str());
    r = get(AF_INET, "GET /metrics HTTP/1.0\n\n");
    QVERIFY2(r.find(" 200 OK") != std::string::npos && r.find("stoker_x 1") != std::string::npos, r.c_str());
    const int v6 = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in6 loop6{};
    loop6.sin6_family = AF_INET6;
    loop6.sin6_addr = in6addr_loopback;
    const bool hasV6 = v6 >= 0 && ::bind(v6, reinterpret_cast<sockaddr*>(&loop6), sizeof loop6) == 0;
    if (v6 >= 0) ::close(v6);
    if (!hasV6) QSKIP("this host has no IPv6 loopback: the IPv4 half passed");
    r = get(AF_INET6, "GET /metrics HTTP/1.1\r\n\r\n");
    QVERIFY2(r.find(" 200 OK") != std::string::npos && r.find("stoker_x 1") != std::string::npos, r.c_str());
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
    QVERIFY2(text.find("stoker_data_wait_ratio{rank=\"1\",device=\"cuda:1\",host=\"node-a\",pid=\"101\"} 0.75") != std::string::npos,
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
