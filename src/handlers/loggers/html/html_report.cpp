// kindling::handlers::HtmlReport: keeps the scalars logged on rank 0 and renders them with
// the page renderer (html_page.h), written through DiskSaver (temporary file, fsync, rename).
#include "kindling/handlers/loggers/html_report.h"

#include <ctime>
#include <mutex>

#include "handlers/loggers/tensorboard/event_file.h"
#include "handlers/loggers/html/html_page.h"
#include "handlers/loggers/html/html_timeline.h"
#include "kindling/error.h"
#include "kindling/dist/dist.h"
#include "kindling/handlers/checkpointing/disk_saver.h"

namespace kindling {
namespace handlers {

struct HtmlReport::Records {
  std::mutex mutex;
  std::vector<detail::ScalarRecord> values;
  bool closed = false;
};

HtmlReport::HtmlReport(std::string path, std::string title)
    : BaseLogger("HtmlReport"), path_(std::move(path)), title_(std::move(title)) {
  KINDLING_CHECK(!path_.empty(),
                 "kindling::handlers::HtmlReport: path is an empty string; give the page's file, "
                 "e.g. \"runs/exp1/report.html\"");
  if (detail::this_rank() != 0) return;  // inert
  const auto slash = path_.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
  filename_ = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  KINDLING_CHECK(!filename_.empty(), "kindling::handlers::HtmlReport: path '", path_,
                 "' names a folder; give the page's file, e.g. \"runs/exp1/report.html\"");
  saver_ = std::make_shared<DiskSaver>(folder, DiskSaverOptions().require_empty(false).save_on_rank(dist::get_rank()));
  records_ = std::make_shared<Records>();
  struct Sink : detail::ScalarSink {
    explicit Sink(std::shared_ptr<Records> r) : records(std::move(r)) {}
    void write(const std::string& tag, const std::string& name, double value, int64_t step) override {
      std::lock_guard<std::mutex> lock(records->mutex);
      if (records->closed) {  // dropped with a warning, not thrown (ClosedSinkWarning)
        closed.dropped("kindling::handlers::HtmlReport", tag.empty() ? name : tag + "/" + name);
        return;
      }
      records->values.push_back({tag, name, step, value});
    }
    void close() override {
      std::lock_guard<std::mutex> lock(records->mutex);
      records->closed = true;
    }
    std::shared_ptr<Records> records;
    detail::ClosedSinkWarning closed;
  };
  set_sink(std::make_shared<Sink>(records_));
}

HtmlReport::~HtmlReport() = default;

void HtmlReport::set_config(std::vector<std::pair<std::string, std::string>> config) { config_ = std::move(config); }

void HtmlReport::add_scalar(const std::string& tag, const std::string& name, double value, int64_t step) {
  if (sink() != nullptr) sink()->write(tag, name, value, step);
}

void HtmlReport::show_timeline(std::shared_ptr<const Timeline> timeline) { timeline_ = std::move(timeline); }

void HtmlReport::render(const std::string& footer) {
  if (!records_) return;
  detail::PageContent page;
  page.title = title_;
  page.config = config_;
  {
    std::lock_guard<std::mutex> lock(records_->mutex);
    page.records = records_->values;
  }
  char now[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(now, sizeof(now), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  page.footer = std::string(now) + (footer.empty() ? "" : ", " + footer);
  if (timeline_) {
    int64_t iteration = -1;
    const auto bands = detail::last_common_step(timeline_->ranks(), iteration);
    if (!bands.empty()) page.timeline_card = detail::render_timeline_card(bands, iteration);
  }
  const std::string html = detail::render_html_page(page);
  saver_->save(std::vector<char>(html.begin(), html.end()), filename_);
}

}  // namespace handlers
}  // namespace kindling
