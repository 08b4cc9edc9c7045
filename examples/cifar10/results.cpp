// The cifar10 example's end-of-run table and summary.json.
#include "results.h"

#include "profile.h"

#include <kindling/handlers/checkpointing/disk_saver.h>
#include <kindling/handlers/loggers/json_logger.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace cifar10 {

double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // the value is in kB
  }
  return 0.0;
}

double typical_samples_per_s(const Results& r) {
  std::vector<double> v = r.train_samples_per_s;
  if (v.size() >= 3) v.erase(v.begin());
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

namespace {

std::string format(const char* pattern, double v) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, v);
  return text;
}

std::string json_list(const std::vector<double>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + format("%.6g", values[i]);
  return out + "]";
}

}  // namespace

std::string table(const Results& r) {
  std::ostringstream out;
  out << "\n| epoch | train accuracy | train loss | test accuracy | test loss |\n"
      << "|------:|---------------:|-----------:|--------------:|----------:|\n";
  for (const Validation& v : r.validations) {
    out << "| " << v.epoch << " | " << format("%.4f", v.train_accuracy) << " | " << format("%.4f", v.train_loss)
        << " | " << format("%.4f", v.test_accuracy) << " | " << format("%.4f", v.test_loss) << " |\n";
  }
  double total = 0;
  for (double s : r.epoch_seconds) total += s;
  double rss = 0;
  for (double m : r.peak_rss_mb) rss = std::max(rss, m);
  out << "\n" << r.dataset << ", " << r.world_size << " process(es) on " << r.backend << ": "
      << format("%.0f", typical_samples_per_s(r)) << " training samples/s, " << r.epoch_seconds.size()
      << " epoch(s) in " << format("%.1f", total) << " s, peak memory " << format("%.0f", rss) << " MiB per rank\n"
      << "Output folder: " << r.output_path << "\n";
  if (!r.iteration_split_ms.empty()) {
    out << "Training iteration on rank 0 (median ms):";
    for (const auto& [part, value] : r.iteration_split_ms) out << " " << part << " " << format("%.1f", value);
    out << "\n";
  }
  return out.str();
}

void write_summary(const Results& r) {
  std::ostringstream json;
  const Validation last = r.validations.empty() ? Validation{} : r.validations.back();
  json << "{\"implementation\": \"kindling\", \"backend\": " << kindling::handlers::JsonLogger::quote(r.backend)
       << ", \"world_size\": " << r.world_size << ", \"dataset\": " << kindling::handlers::JsonLogger::quote(r.dataset)
       << ", \"epochs\": " << r.epoch_seconds.size() << ", \"batch_size\": " << r.batch_size
       << ", \"train_samples_per_s\": " << format("%.6g", typical_samples_per_s(r))
       << ", \"epoch_seconds\": " << json_list(r.epoch_seconds)
       << ", \"train_accuracy\": " << format("%.17g", last.train_accuracy)
       << ", \"train_loss\": " << format("%.17g", last.train_loss)
       << ", \"test_accuracy\": " << format("%.17g", last.test_accuracy)
       << ", \"test_loss\": " << format("%.17g", last.test_loss) << ", \"peak_rss_mb\": " << json_list(r.peak_rss_mb)
       << ", \"output_path\": " << kindling::handlers::JsonLogger::quote(r.output_path);
  if (!r.iteration_split_ms.empty()) json << ", \"iteration_split_ms\": " << to_json(r.iteration_split_ms);
  json << "}\n";
  const std::string text = json.str();
  kindling::handlers::DiskSaver saver(r.output_path, kindling::handlers::DiskSaverOptions().require_empty(false));
  saver.save(std::vector<char>(text.begin(), text.end()), "summary.json");
}

}  // namespace cifar10
