// data/loader_sweep: the sweep. Measures each combination of chosen knob
// values (e.g. num_workers x prefetch) with measureLoader -- warm-up, then
// until the 95 % interval is within the target or a time cap -- and marks
// the fastest, and every point whose interval overlaps the fastest's as "no
// clear difference". Knobs are set by name through the LoaderOptions JSON, so
// any knob works; dataset-level knobs re-open the dataset.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/loader_measure.h"
#include "data/loader_session.h"

namespace stoker {

struct SweepAxis {
  std::string knob;             // a LoaderOptions JSON key
  std::vector<std::string> values;  // JSON texts: "4", "true", "\"resident\""
};

struct SweepPoint {
  std::vector<std::string> values;  // one per axis
  LoaderOptions options;
  bool reopened = false;            // the dataset was opened again for this point's dataset-level knobs
  double samplesPerS = 0;           // the measurement's mean
  double bytesPerS = 0;
  Measurement measurement;
  bool noClearDifference = false;   // its interval overlaps the best point's
  std::string mode;                 // of the first device
  std::string error;                // this combination failed (invalid, out of memory)
};

struct SweepResult {
  std::vector<SweepPoint> points;
  int bestIndex = -1;  // the fastest point without error
  int datasetOpens = 0;
};

// Opens the swept dataset for some options (openDataset(spec, options)).
using DatasetOpener = std::function<std::shared_ptr<Dataset>(const LoaderOptions&)>;

// Knobs that decide how the dataset reaches memory (openDataset reads them),
// not how the loader runs: a point that changes one needs the dataset opened
// again, or it measures the previous point's dataset.
bool datasetKnobsDiffer(const LoaderOptions& a, const LoaderOptions& b);

// Every combination's options, validated: an axis naming no knob or a value of
// the wrong type is Error(BadInput) naming the knob; a combination the loader
// refuses (validation) is kept as a point with its error.
std::vector<SweepPoint> sweepPoints(const LoaderOptions& base, const std::vector<SweepAxis>& axes);

// Parses "1,2,4" into JSON texts for `knob` (numbers, true/false, or names
// quoted as strings).
SweepAxis parseSweepAxis(const std::string& knob, const std::string& commaValues);

// Measures each point (`measure`; session.epochs is not used). The dataset
// is opened with the first point's options and again whenever a point's
// dataset-level knobs differ from the open one's. `onPoint` is called after
// each, from this thread; the "no clear difference" marks are set at the end.
SweepResult runSweep(const DatasetOpener& open, const LoaderOptions& base, const std::vector<SweepAxis>& axes,
                     const std::vector<DeviceSpec>& devices, const LoaderSessionOptions& session,
                     const MeasureSpec& measure, const CancelToken* cancel,
                     const std::function<void(const SweepPoint&, int index, int count)>& onPoint);

}  // namespace stoker
