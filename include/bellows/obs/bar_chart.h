// Horizontal bar charts of measured ratios (the optimization matrix of `bellows bench --matrix`), written as SVG
// and PNG. Drawn with cairo (Debian's libcairo2): one drawing onto an SVG surface and onto an image surface that
// cairo writes as PNG, so the two files show the same chart and no converter is needed.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace bellows::obs {

struct BarChartRow {
  std::string label;        // left of the bars, once per row
  std::vector<double> values;  // one per panel; < 0: no bar (not measured)
  std::vector<double> lows, highs;  // per panel: the spread drawn as a whisker; < 0: none
  std::vector<std::string> notes;   // per panel: text right of the bar ("1.76x", "not measured")
};

struct BarChartPanel {
  std::string title;        // "samples/s vs baseline"
  double reference = 1.0;   // a dashed line at this value
};

struct BarChart {
  std::string title, subtitle;
  std::vector<BarChartPanel> panels;
  std::vector<BarChartRow> rows;
};

// kResource error naming the file when it cannot be written; files are replaced atomically.
void write_bar_chart_svg(const BarChart& chart, const std::filesystem::path& path);
void write_bar_chart_png(const BarChart& chart, const std::filesystem::path& path);

}  // namespace bellows::obs
