// Telemetry: records survive JSON, the publisher delivers JSON lines to a
// listener from several "ranks", never blocks when nobody reads (drops and
// counts instead), appends to files, and refuses malformed addresses.
#include <QtTest>

#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include <QElapsedTimer>
#include <cmath>
#include <nlohmann/json.hpp>

#include "data/bottleneck.h"
#include "telemetry/input_bound.h"
#include "telemetry/socket_address.h"
#include "telemetry/telemetry_listener.h"
#include "telemetry/telemetry_queue.h"
#include "telemetry/stragglers.h"
#include "telemetry/telemetry_csv.h"
#include "telemetry/telemetry_publisher.h"
#include "util/error.h"
#include "util/open_file_limit.h"
#include "test_support.h"

using namespace stoker;

namespace {

TelemetryRecord sample(int rank, std::int64_t step) {
  TelemetryRecord r;
  r.time = 1.7e9;
  r.host = "node-a";
  r.pid = 4242;
  r.rank = rank;
  r.device = "cuda:" + std::to_string(rank);
  r.epoch = 3;
  r.step = step;
  r.steps_total = 100;
  r.samples_per_s = 12345.5;
  r.bytes_per_s = 1e9;
  r.batch_latency_p50_ms = 1.5;
  r.batch_latency_p99_ms = 4.25;
  r.data_wait_ms = 0.5;
  r.step_ms = 20;
  r.prefetch_depth = 6;
  r.ready = 5;
  r.mode = "streaming";
  r.mem_used = 1 << 30;
  r.mem_reserved = 1 << 29;
  r.mem_allocated = 1 << 28;
  r.mem_total = 80LL << 30;
  return r;
}

// Polls until `want` records came or 5 s passed.
std::vector<TelemetryRecord> receive(TelemetryListener& l, std::size_t want) {
  std::vector<TelemetryRecord> got;
  QElapsedTimer t;
  t.start();
  while (got.size() < want && t.elapsed() < 5000)
    for (auto& r : l.poll(50)) got.push_back(r);
  return got;
}

}  // namespace

class TestTelemetry : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private Q_SLOTS:
  // The Loader workspace's bottleneck panel: what limits the run, in words, and the knob to turn.
  void bottleneckNamesTheKnob() {
    TelemetryRecord r = sample(0, 1);
    r.device = "cuda:0";
    r.mode = "streaming";
    r.step_ms = 10;
    r.data_wait_ms = 0.1;  // 1 %: the loader keeps up
    LoaderOptions o;
    o.num_workers = 2;
    Bottleneck b = diagnoseBottleneck(r, o, 16);
    QCOMPARE(b.kind, InputBound::Fine);
    QVERIFY2(b.headline.rfind("Compute-bound", 0) == 0 && b.knob.empty(), b.headline.c_str());
    r.data_wait_ms = 10;  // 50 %
    b = diagnoseBottleneck(r, o, 16);
    QCOMPARE(b.kind, InputBound::InputBound);
    QVERIFY2(b.headline.find("waits 50% of the time") != std::string::npos, b.headline.c_str());
    QCOMPARE(b.knob, std::string("num_workers"));
    QVERIFY2(b.advice.find("2 \u2192 3") != std::string::npos, b.advice.c_str());
    o.num_workers = 15;  // every core busy: the ring, then pinning, then resident
    r.ready = 0;
    QCOMPARE(diagnoseBottleneck(r, o, 16).knob, std::string("prefetch"));
    r.ready = 3;
    o.pin_memory = false;
    QCOMPARE(diagnoseBottleneck(r, o, 16).knob, std::string("pin_memory"));
    o.pin_memory = true;
    QCOMPARE(diagnoseBottleneck(r, o, 16).knob, std::string("loading_mode"));
    // Batches that wait on the network (uncached remote token windows): the workers wait rather
    // than compute, so a 2-core machine's one useful worker is not the bound.
    o.num_workers = 1;
    r.stages_ms = {{"read", 40.0}, {"collate", 1.0}};
    b = diagnoseBottleneck(r, o, 2, 16);
    QCOMPARE(b.knob, std::string("num_workers"));
    QVERIFY2(b.advice.find("round trip") != std::string::npos && b.advice.find("1 \u2192 16") != std::string::npos &&
                 b.advice.find("every core") == std::string::npos,
             b.advice.c_str());
    QCOMPARE(diagnoseBottleneck(r, o, 2).knob, std::string("loading_mode"));  // the same record, local: "busy on every core"
    o.num_workers = 16;
    b = diagnoseBottleneck(r, o, 2, 16);
    QCOMPARE(b.knob, std::string("cache_dir"));
    QVERIFY2(b.advice.find("wait on the server") != std::string::npos, b.advice.c_str());
    o.num_workers = 15;
    r.stages_ms.clear();
    r.step_ms = 0;  // no training step: say so rather than blame the loader
    QVERIFY(diagnoseBottleneck(r, o, 16).headline.find("Step is 0") != std::string::npos);
    r.data_wait_ms = 0;
    QCOMPARE(diagnoseBottleneck(r, o, 16).kind, InputBound::Unknown);
  }

  void inputBoundThresholds() {
    // data wait / (data wait + step): < 5 % fine, 5-20 % moderate, >= 20 % input-bound.
    QCOMPARE(classifyInputBound(dataWaitShare(0, 10)), InputBound::Fine);
    QCOMPARE(classifyInputBound(dataWaitShare(0.49, 9.51)), InputBound::Fine);
    QCOMPARE(classifyInputBound(dataWaitShare(0.5, 9.5)), InputBound::Moderate);
    QCOMPARE(classifyInputBound(dataWaitShare(1.99, 8.01)), InputBound::Moderate);
    QCOMPARE(classifyInputBound(dataWaitShare(2, 8)), InputBound::InputBound);
    QCOMPARE(classifyInputBound(dataWaitShare(10, 0)), InputBound::InputBound);
    // No timing yet, or nonsense from a hostile publisher: unknown, never a verdict.
    QCOMPARE(classifyInputBound(dataWaitShare(0, 0)), InputBound::Unknown);
    QCOMPARE(classifyInputBound(dataWaitShare(-1, 5)), InputBound::Unknown);
    QCOMPARE(classifyInputBound(dataWaitShare(std::nan(""), 5)), InputBound::Unknown);
    QCOMPARE(classifyInputBound(dataWaitShare(1, INFINITY)), InputBound::Unknown);
    QCOMPARE(inputBoundName(InputBound::InputBound), std::string("input-bound"));
  }

  void queueDropsTheOldestWhenFull() {
    TelemetryQueue q(3);
    for (int i = 0; i < 5; ++i) {
      TelemetryRecord r;
      r.step = i;
      q.onRecord(r);
    }
    const auto got = q.takeAll();
    QCOMPARE(got.size(), std::size_t(3));
    QCOMPARE(got.front().step, std::int64_t(2));
    QCOMPARE(q.dropped(), std::int64_t(2));
    QVERIFY(q.takeAll().empty());
  }

  void recordRoundTrip() {
    const TelemetryRecord r = sample(1, 7);
    const std::string line = telemetryToJson(r);
    QVERIFY(line.find('\n') == std::string::npos);
    for (const char* key : {"\"time\"", "\"host\"", "\"pid\"", "\"rank\"", "\"device\"", "\"epoch\"", "\"step\"",
                            "\"samples_per_s\"", "\"bytes_per_s\"", "\"batch_latency_p50_ms\"", "\"data_wait_ms\"",
                            "\"step_ms\"", "\"prefetch_depth\"", "\"ready\"", "\"mode\"", "\"mem_used\"",
                            "\"mem_reserved\"", "\"mem_allocated\"", "\"mem_total\""})
      QVERIFY2(line.find(key) != std::string::npos, key);
    const TelemetryRecord back = telemetryFromJson(line);
    QCOMPARE(telemetryToJson(back), line);
    for (const char* bad : {"not json", "[1,2]", R"({"rank": "zero"})"}) {
      try {
        telemetryFromJson(bad);
        QFAIL(bad);
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
      }
    }
    // "options" nested 400,000 levels deep (an 800 KB line): serialising it recursed once a level
    // and overflowed the listener thread's stack. Refused as it arrives; brackets in strings count
    // for nothing.
    std::string deep = line;
    deep.insert(deep.size() - 1, ",\"options\":" + std::string(1, '{') + "\"a\":" + std::string(400000, '[') +
                                     std::string(400000, ']') + std::string(1, '}'));
    try {
      telemetryFromJson(deep);
      QFAIL("a record nested 400,000 levels deep was accepted");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("nests deeper than 16 levels") != std::string::npos, e.what());
    }
    // (Built from pieces: moc counts the braces inside a raw string literal too.)
    const std::string opened = std::string(22, '[') + "\"" + std::string(4, '{');  // [[..["{{{{
    std::string bracketsInAString = line;
    bracketsInAString.insert(bracketsInAString.size() - 1, ",\"loader\":\"" + std::string(22, '[') + "\\\"" +
                                                               std::string(4, '{') + "\"");
    QCOMPARE(telemetryFromJson(bracketsInAString).loader, opened);
  }

  // DESIGN.md's required fields: a record without one is refused, naming what it lacks.
  // worker, steps_total and epoch_end default; the figures a publisher may not know (the Python
  // probe has no worker timings, a CPU run no device memory) become unknown -- NaN or -1, left
  // out again when re-serialised -- never a measured 0.
  void recordsMustCarryTheRequiredFields() {
    nlohmann::json full = nlohmann::json::parse(telemetryToJson(sample(1, 7)));
    for (const char* optional : {"worker", "steps_total", "epoch_end"}) full.erase(optional);
    QCOMPARE(telemetryFromJson(full.dump()).step, std::int64_t(7));
    for (const char* required : {"time", "host", "pid", "rank", "device", "epoch", "step", "samples_per_s",
                                 "data_wait_ms", "step_ms", "mode"}) {
      for (bool asNull : {false, true}) {
        nlohmann::json j = full;
        if (asNull) j[required] = nullptr;
        else j.erase(required);
        try {
          telemetryFromJson(j.dump());
          QFAIL(required);
        } catch (const Error& e) {
          QCOMPARE(e.kind(), ErrorKind::BadInput);
          const std::string what = e.what();
          QVERIFY2(what.find("lacks required fields: " + std::string(required)) != std::string::npos, e.what());
        }
      }
    }
    try {
      telemetryFromJson(R"({"rank": 3})");
      QFAIL("a bare rank");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("time, host, pid, device") != std::string::npos, e.what());
    }
    nlohmann::json lean = full;
    for (const char* knowable : {"bytes_per_s", "batch_latency_p50_ms", "batch_latency_p99_ms", "prefetch_depth",
                                 "ready", "mem_used", "mem_reserved", "mem_allocated", "mem_total"}) {
      QVERIFY2(lean.contains(knowable), knowable);
      if (std::string(knowable) == "ready") lean[knowable] = nullptr;
      else lean.erase(knowable);
    }
    const TelemetryRecord r = telemetryFromJson(lean.dump());
    QVERIFY(!isKnown(r.bytes_per_s) && !isKnown(r.batch_latency_p50_ms) && !isKnown(r.batch_latency_p99_ms));
    QVERIFY(!isKnown(r.prefetch_depth) && !isKnown(r.ready));
    QVERIFY(!isKnown(r.mem_used) && !isKnown(r.mem_reserved) && !isKnown(r.mem_allocated) && !isKnown(r.mem_total));
    QVERIFY(r.stages_ms.empty() && r.source.empty() && !isKnown(r.world_size) && !isKnown(r.dropped));
    const auto again = nlohmann::json::parse(telemetryToJson(r));
    for (const char* knowable : {"bytes_per_s", "ready", "mem_total", "stages_ms", "source", "world_size", "dropped"})
      QVERIFY2(!again.contains(knowable), knowable);
    // A hostile peer cannot send huge names (the Monitor keeps a series per name) nor figures
    // that are negative, beyond 1e18 (casting 1e300 to bytes is undefined behaviour) or absurd.
    for (const auto& [field, value] : std::vector<std::pair<const char*, nlohmann::json>>{
             {"host", std::string(300, 'h')}, {"loader", std::string(257, 'l')}, {"samples_per_s", 1e300},
             {"bytes_per_s", -5.0}, {"data_wait_ms", -0.5}, {"time", 1e19}}) {
      nlohmann::json j = full;
      j[field] = value;
      try {
        telemetryFromJson(j.dump());
        QFAIL(field);
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
        QVERIFY2(std::string(e.what()).find(field) != std::string::npos, e.what());
      }
    }
    // -1 is this struct's "unknown": a publisher cannot send it as a measured value. Nor is a
    // rank, pid, epoch, step or worker negative: it would be a series no process is.
    for (const char* count : {"ready", "mem_total", "dropped", "world_size", "rank", "pid", "epoch", "step", "worker", "steps_total"}) {
      nlohmann::json j = full;
      j[count] = -1;
      try {
        telemetryFromJson(j.dump());
        QFAIL(count);
      } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find("is negative") != std::string::npos, e.what());
      }
    }
  }

  // DESIGN.md's "Telemetry, continued": per-stage times, the publisher's kind, the torchrun
  // layout, pinned bytes, its drop count and a loader name travel when present.
  void optionalFieldsRoundTrip() {
    TelemetryRecord r = sample(2, 9);
    r.stages_ms = {{"read", 0.25}, {"decode", 3.5}, {"copy", 0.125}};
    r.source = "python";
    r.local_rank = 2;
    r.world_size = 8;
    r.pinned_bytes = 64 << 20;
    r.dropped = 17;
    r.loader = "train.py:42";
    r.collectives = "nccl";
    r.net_requests = 1200;
    r.net_bytes = 3LL << 30;
    r.net_retries = 0;  // known: none retried
    const std::string line = telemetryToJson(r);
    const TelemetryRecord back = telemetryFromJson(line);
    QCOMPARE(back.stages_ms.size(), std::size_t(3));
    QCOMPARE(back.stages_ms.at("decode"), 3.5);
    QCOMPARE(back.source, std::string("python"));
    QCOMPARE(back.local_rank, 2);
    QCOMPARE(back.world_size, 8);
    QCOMPARE(back.pinned_bytes, std::int64_t(64 << 20));
    QCOMPARE(back.dropped, std::int64_t(17));
    QCOMPARE(back.loader, std::string("train.py:42"));
    QCOMPARE(back.collectives, std::string("nccl"));
    QCOMPARE(back.net_requests, std::int64_t(1200));
    QCOMPARE(back.net_bytes, std::int64_t(3LL << 30));
    QCOMPARE(back.net_retries, std::int64_t(0));
    QVERIFY(line.find("\"net_retries\":0") != std::string::npos);
    QCOMPARE(telemetryToJson(back), line);
    QVERIFY(telemetryToJson(sample(2, 9)).find("net_") == std::string::npos);  // unknown: left out
    // Only DESIGN.md's stage names are kept (a hostile peer cannot grow the map); a stage must be
    // a non-negative number and stages_ms an object.
    nlohmann::json j = nlohmann::json::parse(line);
    j["stages_ms"]["gpu_magic"] = 1.0;
    QCOMPARE(telemetryFromJson(j.dump()).stages_ms.size(), std::size_t(3));
    for (const char* bad : {R"({"decode": -1})", R"({"decode": "slow"})", "[1, 2]"}) {
      nlohmann::json k = nlohmann::json::parse(line);
      k["stages_ms"] = nlohmann::json::parse(bad);
      try {
        telemetryFromJson(k.dump());
        QFAIL(bad);
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
      }
    }
  }

  // The dataset spec and LoaderOptions a Python loader sends (the Monitor's "Tune in Loader"):
  // kept as they came (a URL's secrets hidden), bounded, and the options must be an object.
  void datasetAndOptionsRoundTrip() {
    TelemetryRecord r = sample(0, 1);
    r.dataset = "imagefolder:/data/train";
    r.options = R"({"batch_size":64,"num_workers":3})";
    const TelemetryRecord back = telemetryFromJson(telemetryToJson(r));
    QCOMPARE(back.dataset, r.dataset);
    QCOMPARE(nlohmann::json::parse(back.options)["num_workers"].get<int>(), 3);
    const nlohmann::json line = nlohmann::json::parse(telemetryToJson(r));
    QVERIFY(line["options"].is_object());  // an object in the line, not a string holding one
    // Another sender's URL with a password or a presigned signature: hidden as it arrives.
    nlohmann::json secret = line;
    secret["dataset"] = "wds:https://ann:hunter2@data.example/s-{0..9}.tar?X-Amz-Signature=abc123";
    const TelemetryRecord got = telemetryFromJson(secret.dump());
    QCOMPARE(got.dataset, std::string("wds:https://***@data.example/s-{0..9}.tar?X-Amz-Signature=***"));
    for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"options", "batch_size=64"},
             {"options", nlohmann::json::array({1, 2})},
             {"options", nlohmann::json{{"transforms", std::string(20000, 'x')}}},
             {"dataset", std::string(5000, 'd')},
             {"dataset", 42}}) {
      nlohmann::json k = line;
      k[field] = value;
      try {
        telemetryFromJson(k.dump());
        QFAIL(qPrintable(QString::fromStdString(field + " accepted: " + value.dump().substr(0, 40))));
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
      }
    }
  }

  // The straggler is named by where its time goes (a synchronous job evens out iterations):
  // a robust z-score of data wait and of step, with an absolute floor so noise names nobody.
  void stragglersByRobustZScore() {
    auto ranks = [](std::vector<std::pair<double, double>> waitStep) {
      std::vector<RankTiming> out;
      for (std::size_t r = 0; r < waitStep.size(); ++r)
        out.push_back({static_cast<int>(r), "cuda:0", waitStep[r].first, waitStep[r].second});
      return out;
    };
    // DDP, 4 ranks, rank 2 starved: the others wait in the all-reduce (long step), it waits for data.
    auto s = findStragglers(ranks({{0.3, 70}, {0.4, 71}, {50, 20}, {0.2, 69}}));
    QCOMPARE(s.size(), std::size_t(1));
    QCOMPARE(s[0].rank, 2);
    QCOMPARE(s[0].metric, std::string("data wait"));
    QCOMPARE(describeStraggler(s[0]), std::string("rank 2 (cuda:0): data wait 50.0 ms vs 0.3 ms typical of the others"));
    // Over half the ranks exactly equal (MAD 0): the one apart is still named.
    QCOMPARE(findStragglers(ranks({{1, 20}, {1, 20}, {1, 20}, {9, 20}})).size(), std::size_t(1));
    // Independent ranks, one computing slowly: named on its step.
    s = findStragglers(ranks({{0.1, 20}, {0.1, 21}, {0.1, 19.5}, {0.1, 20.5}, {0.1, 45}}));
    QCOMPARE(s.size(), std::size_t(1));
    QCOMPARE(s[0].rank, 4);
    QCOMPARE(s[0].metric, std::string("step"));
    // Spread within noise, or far in z but tiny in ms: nobody.
    QVERIFY(findStragglers(ranks({{0.1, 20}, {0.2, 21}, {0.15, 19}, {0.12, 20.4}})).empty());
    QVERIFY(findStragglers(ranks({{0.01, 20}, {0.011, 20}, {0.012, 20}, {0.5, 20}})).empty());
    QVERIFY(findStragglers(ranks({{1, 10}, {1, 10}, {1, 10}})).empty());
    // Two ranks: the input-bound one, while the other is not.
    s = findStragglers(ranks({{1.4, 148}, {139, 10.5}}));
    QCOMPARE(s.size(), std::size_t(1));
    QCOMPARE(s[0].rank, 1);
    QCOMPARE(s[0].median_ms, 1.4);
    QVERIFY(findStragglers(ranks({{30, 10}, {31, 10}})).empty());  // both starved: no one stands out
    // 256 ranks, one starved; unknown timings are ignored; one rank alone is nobody's straggler.
    std::vector<std::pair<double, double>> many(256, {0.4, 19.6});
    many[137] = {30, 20};
    many[3] = {NAN, 20};
    s = findStragglers(ranks(many));
    QCOMPARE(s.size(), std::size_t(1));
    QCOMPARE(s[0].rank, 137);
    QVERIFY(findStragglers(ranks({{50, 1}})).empty());
  }

  // A live job's timings: each (rank, device)'s newest record; a series silent for more than
  // 10 s before the newest (a stopped process, a loader that ran once) is left out.
  void liveTimingsSkipStaleSeries() {
    TelemetryRecord old = sample(0, 1), fresh = sample(0, 2), other = sample(1, 1), gone = sample(2, 1);
    old.time = 100;
    old.data_wait_ms = 50;
    fresh.time = 130;
    fresh.data_wait_ms = 0.5;
    other.time = 125;
    gone.time = 119;
    const auto t = liveRankTimings({&old, &fresh, &other, &gone});
    QCOMPARE(t.size(), std::size_t(2));
    QCOMPARE(t[0].rank, 0);
    QCOMPARE(t[0].data_wait_ms, 0.5);
    QCOMPARE(t[1].rank, 1);
    QVERIFY(liveRankTimings({}).empty());
  }

  // The Monitor's CSV export: every field, an unknown figure as an empty cell, text quoted.
  void csvRows() {
    const std::string header = telemetryCsvHeader();
    QVERIFY(header.rfind("time,host,pid,rank,local_rank,world_size,device,loader,", 0) == 0);
    QVERIFY(header.find(",stage_decode_ms,") != std::string::npos);
    QVERIFY(header.find(",dropped,net_requests,net_bytes,net_retries,") != std::string::npos);
    TelemetryRecord r = sample(1, 7);
    r.loader = "a \"quoted\", name";
    r.stages_ms = {{"decode", 2.5}};
    r.mem_total = kUnknown;
    const std::string row = telemetryCsvRow(r);
    const auto count = [](const std::string& t) { return std::count(t.begin(), t.end(), ','); };
    QCOMPARE(count(row) - 1, count(header));  // the quoted loader holds a comma of its own
    QVERIFY2(row.find(",\"a \"\"quoted\"\", name\",") != std::string::npos, row.c_str());
    QVERIFY(row.find(",536870912,268435456,,") != std::string::npos);  // reserved, allocated, total unknown
    QVERIFY(row.find(",2.5,") != std::string::npos);
    // A name a spreadsheet would run as a formula (CSV injection) starts with a ' in the export.
    TelemetryRecord hostile = sample(1, 7);
    hostile.host = "=HYPERLINK(\"http://x\")";
    hostile.device = "@SUM(A1)";
    const std::string cells = telemetryCsvRow(hostile);
    QVERIFY2(cells.find(",\"'=HYPERLINK(\"\"http://x\"\")\",") != std::string::npos, cells.c_str());
    QVERIFY2(cells.find(",'@SUM(A1),") != std::string::npos, cells.c_str());
  }

  // 300 peers each holding 250 KiB of a line that never ends (75 MiB): the listener keeps no more
  // than its 64 MiB of unfinished lines (4,096 peers could hold 4 GiB before), cuts off the peers
  // that push past it, and an honest peer's records still arrive.
  void unfinishedLinesAreBoundedOverAllPeers() {
    raiseOpenFileLimit();
    TelemetryListener listener("127.0.0.1:0");
    std::vector<int> hoarders;
    for (int i = 0; i < 300; ++i) {
      hoarders.push_back(stoker::test::connectToLoopback(listener.port()));
      QVERIFY(hoarders.back() >= 0);
    }
    const std::string part(250 << 10, 'x');
    std::vector<std::size_t> sent(hoarders.size(), 0);
    int honest = stoker::test::connectToLoopback(listener.port());
    const std::string line = telemetryToJson(sample(3, 1)) + "\n";
    std::size_t most = 0;
    int received = 0;
    QElapsedTimer clock;
    clock.start();
    while (clock.elapsed() < 30000) {
      bool more = false;
      for (std::size_t i = 0; i < hoarders.size(); ++i) {
        if (sent[i] >= part.size()) continue;
        const ssize_t n = ::send(hoarders[i], part.data() + sent[i], part.size() - sent[i], MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) sent[i] += static_cast<std::size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) sent[i] = part.size();  // cut off already
        more = more || sent[i] < part.size();
      }
      QVERIFY(::send(honest, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size()));
      for (const auto& r : listener.poll(20)) received += r.rank == 3;
      most = std::max(most, listener.pendingBytes());
      if (!more && received > 20) break;
    }
    QVERIFY2(most <= (64u << 20) + (256u << 10), qPrintable(QString::number(most)));
    QVERIFY2(listener.badLines() > 0, "no hoarding peer was cut off");
    QVERIFY2(received > 20, qPrintable(QString::number(received)));
    for (int fd : hoarders) ::close(fd);
    ::close(honest);
  }

  // A publisher whose host dies sends no FIN: its connection held a listener's slot (of 4096) for
  // good. The listener's connections, accepted or dialled, now probe with TCP keepalive (60 s
  // idle, 6 probes 10 s apart), so such a peer is closed in about two minutes; a quiet live one
  // answers the probes and stays. Checked on the listener's own sockets (/proc/self/fd).
  void listenerConnectionsProbeDeadPeers() {
    const auto keepAliveOfPeer = [](int localPort) {  // the listener's socket whose peer is localPort
      QDir fds("/proc/self/fd");
      for (const QString& name : fds.entryList(QDir::System | QDir::Files | QDir::NoDotAndDotDot)) {
        const int fd = name.toInt();
        sockaddr_in peer{};
        socklen_t len = sizeof peer;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET ||
            ntohs(peer.sin_port) != localPort)
          continue;
        int on = 0, idle = 0;
        socklen_t n = sizeof on;
        ::getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, &n);
        n = sizeof idle;
        ::getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, &n);
        return on ? idle : 0;
      }
      return -1;  // no such socket
    };
    TelemetryListener listener("127.0.0.1:0");
    const int client = stoker::test::connectToLoopback(listener.port());
    QVERIFY(client >= 0);
    QTRY_COMPARE_WITH_TIMEOUT((listener.poll(50), listener.connections()), 1, 10000);
    sockaddr_in mine{};
    socklen_t mineLen = sizeof mine;
    QCOMPARE(::getsockname(client, reinterpret_cast<sockaddr*>(&mine), &mineLen), 0);
    QCOMPARE(keepAliveOfPeer(ntohs(mine.sin_port)), 60);
    ::close(client);
    // Dialled: the listener connects to a publisher's `listen:` address.
    TelemetryPublisher publisher({"listen:127.0.0.1:0"});
    QTRY_VERIFY_WITH_TIMEOUT(publisher.listeningPort(0) > 0, 10000);
    listener.dial("127.0.0.1:" + std::to_string(publisher.listeningPort(0)));
    QTRY_COMPARE_WITH_TIMEOUT((listener.poll(50), listener.connections()), 1, 10000);
    QCOMPARE(keepAliveOfPeer(publisher.listeningPort(0)), 60);
  }

  void publishersReachAListener() {
    TelemetryListener listener("127.0.0.1:0");
    QVERIFY(listener.port() > 0);
    const std::string address = "127.0.0.1:" + std::to_string(listener.port());
    TelemetryPublisher rank0({address}), rank1({"tcp://" + address});
    // Connections are set up by the publisher thread, retried once a second: give them up to
    // 30 s (a sanitizer build is slow to connect the first time; under `ctest -j2` beside a
    // multi-process suite on 2 cores, 100 polls once did not suffice: a poll that data from the
    // first connection ends early is no 50 ms). The loop ends when both are in.
    QElapsedTimer connecting;
    connecting.start();
    while (connecting.elapsed() < 30000 && listener.connections() < 2) {
      rank0.publishLine("{}");
      rank1.publishLine("{}");
      listener.poll(50);
    }
    QCOMPARE(listener.connections(), 2);
    for (int s = 0; s < 50; ++s) {
      rank0.onRecord(sample(0, s));
      rank1.onRecord(sample(1, s));
    }
    rank0.flush(2000);
    rank1.flush(2000);
    auto got = receive(listener, 100);
    int perRank[2] = {0, 0};
    for (const auto& r : got)
      if (r.mode == "streaming") ++perRank[r.rank];
    QCOMPARE(perRank[0], 50);
    QCOMPARE(perRank[1], 50);
    QCOMPARE(got.back().mem_total, 80LL << 30);
    // A record from two days ahead of this clock is refused as a bad line (it made every honest
    // rank look stale and pushed the plots' window past their points); the next one arrives.
    TelemetryRecord ahead = sample(0, 98), next = sample(0, 99);
    ahead.time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() + 2 * 86400;
    const std::int64_t badBefore = listener.badLines();
    rank0.onRecord(ahead);
    rank0.onRecord(next);
    rank0.flush(2000);
    got = receive(listener, 1);
    QCOMPARE(got.size(), std::size_t(1));
    QCOMPARE(got[0].step, std::int64_t(99));
    QCOMPARE(listener.badLines(), badBefore + 1);
  }

  // A `listen:` publisher's 16 monitor slots held by connections that never read: once their
  // backlogs fill, a monitor dialling in takes the place of one of them and gets the records (it
  // was accepted and closed at once, for good).
  void stalledMonitorsMakeRoomForOneThatReads() {
    TelemetryPublisher job({"listen:127.0.0.1:0"}, 64);
    const int port = job.listeningPort(0);
    QVERIFY(port > 0);
    std::vector<int> stalled;
    for (int i = 0; i < 16; ++i) {
      stalled.push_back(stoker::test::connectToLoopback(port));
      QVERIFY(stalled.back() >= 0);
    }
    const std::string big(16000, 'x');
    for (int i = 0; i < 2000; ++i) {  // 32 MB to each: past the socket buffers, every backlog fills
      job.publishLine("{\"pad\": \"" + big + "\"}");
      if (i % 32 == 31) job.flush(2000);  // the queue holds 64 lines: let it empty
    }
    TelemetryListener monitor("");
    monitor.dial("127.0.0.1:" + std::to_string(port));
    std::vector<TelemetryRecord> got;
    QElapsedTimer clock;
    clock.start();
    while (got.empty() && clock.elapsed() < 10000) {
      job.onRecord(sample(7, 1));
      for (auto& r : monitor.poll(50)) got.push_back(r);
    }
    QVERIFY2(!got.empty(), "the monitor that reads got no record");
    QCOMPARE(got.front().rank, 7);
    for (int fd : stalled) ::close(fd);
  }

  void neverBlocksWithoutAReader() {
    // Nobody listens on this port: every record is dropped and counted.
    TelemetryListener placeholder("127.0.0.1:0");
    const int port = placeholder.port();
    { TelemetryListener closing("127.0.0.1:0"); }
    TelemetryPublisher nobody({"127.0.0.1:1"}, 64);
    for (int i = 0; i < 10000; ++i) nobody.onRecord(sample(0, i));
    nobody.flush(2000);
    QCOMPARE(nobody.sent(), 0);
    QCOMPARE(nobody.dropped(), 10000);

    // A listener that never reads: the socket buffers fill, then records drop.
    TelemetryPublisher stuck({"127.0.0.1:" + std::to_string(port)}, 64);
    placeholder.poll(200);  // accept, then never read again
    const std::string big(16000, 'x');
    for (int i = 0; i < 5000; ++i) stuck.publishLine("{\"pad\": \"" + big + "\"}");
    stuck.flush(5000);
    QVERIFY2(stuck.dropped() > 0, qPrintable(QString::number(stuck.sent())));
    QCOMPARE(stuck.sent() + stuck.dropped(), 5000);
  }

  void appendsToFiles() {
    const std::string path = dir_.filePath("records.jsonl").toStdString();
    {
      TelemetryPublisher file({"file:" + path});
      for (int s = 0; s < 5; ++s) file.onRecord(sample(0, s));
    }
    QFile f(QString::fromStdString(path));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QList<QByteArray> lines = f.readAll().trimmed().split('\n');
    QCOMPARE(lines.size(), 5);
    QCOMPARE(telemetryFromJson(lines[4].toStdString()).step, 4);
  }

  void badAddresses() {
    for (const char* bad : {"nohost", "host:99999", "host:abc", "file:"}) {
      try {
        TelemetryPublisher p({bad});
        QFAIL(bad);
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
        QVERIFY(std::string(e.what()).find("address") != std::string::npos);
      }
    }
  }

  // Found by fuzz_telemetry: a float where an integer belongs (1e30 for "pid") was cast to int64
  // unchecked -- undefined behaviour -- and a wide integer wrapped into an int field.
  void integerFieldsMustHoldIntegersInRange() {
    for (const char* field : {R"({"pid": 1e30})", R"({"rank": 4294967296})", R"({"step": 2.5})", R"({"ready": -1e300})",
                              R"({"mem_total": 18446744073709551615})"}) {
      nlohmann::json j = nlohmann::json::parse(telemetryToJson(sample(1, 7)));
      j.update(nlohmann::json::parse(field));  // a complete record with one bad number
      const std::string bad = j.dump();
      try {
        telemetryFromJson(bad);
        QFAIL(field);
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
        QVERIFY2(std::string(e.what()).find("is not an integer in range") != std::string::npos, e.what());
      }
    }
    nlohmann::json j = nlohmann::json::parse(telemetryToJson(sample(1, 7)));
    j["rank"] = 3.0;  // an integral float is an integer
    QCOMPARE(telemetryFromJson(j.dump()).rank, 3);
  }

  // Found by fuzzing (tests/fuzz/regressions/socket_address): strtol took signs, spaces and a
  // trailing NUL, and hosts with control characters, slashes or bare IPv6 colons were accepted,
  // so an address did not print back as itself.
  void addressesAreStrict() {
    for (const std::string bad : {std::string("host: 80"), std::string("host:+80"), std::string("host:80\0", 8),
                                  std::string("ho st:80"), std::string("a/b:80"), std::string("::1:80"),
                                  std::string("[]:80"), std::string("[tcp://x]:80"), std::string("host:080000")}) {
      try {
        parseSocketAddress(bad);
        QFAIL(bad.c_str());
      } catch (const Error& e) {
        QCOMPARE(e.kind(), ErrorKind::BadInput);
      }
    }
    const SocketAddress v6 = parseSocketAddress("tcp://[::1]:7070");
    QCOMPARE(v6.host, std::string("::1"));
    QCOMPARE(v6.port, 7070);
    QCOMPARE(v6.text(), std::string("[::1]:7070"));
    QCOMPARE(parseSocketAddress(v6.text()).host, std::string("::1"));
    QCOMPARE(parseSocketAddress(":0").port, 0);
    QCOMPARE(parseSocketAddress("node-3.cluster:29650").host, std::string("node-3.cluster"));
  }

  // The Monitor's processes raise their open-file limit (a connection per rank ran out at the usual
  // 1,024 before the listener's 4,096 peers): the soft limit reaches the hard one, at most 65,536.
  void openFileLimitIsRaised() {
    rlimit before{};
    QCOMPARE(getrlimit(RLIMIT_NOFILE, &before), 0);
    const long now = raiseOpenFileLimit();
    rlimit after{};
    QCOMPARE(getrlimit(RLIMIT_NOFILE, &after), 0);
    const rlim_t wanted = after.rlim_max == RLIM_INFINITY ? 65536 : std::min<rlim_t>(after.rlim_max, 65536);
    QVERIFY(after.rlim_cur == RLIM_INFINITY || after.rlim_cur >= wanted);  // raised, or higher already
    QVERIFY(after.rlim_max == before.rlim_max);
    QVERIFY(now == -1 || now == static_cast<long>(after.rlim_cur));
  }
};

QTEST_GUILESS_MAIN(TestTelemetry)
#include "tst_telemetry.moc"
