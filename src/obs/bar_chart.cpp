// Bar charts through cairo; see bar_chart.h. Written here rather than taken from a plotting library: the chart is
// a few rectangles, lines and labels, and cairo (already a Debian package) gives both file formats from one drawing.
#include "bellows/obs/bar_chart.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "bellows/util/atomic_file.h"
#include "bellows/util/check.h"

namespace bellows::obs {
namespace {

constexpr double kLabelWidth = 330, kPanelWidth = 330, kRowHeight = 26, kTop = 78, kBottom = 40, kMargin = 16;

double width_of(const BarChart& c) { return kLabelWidth + kPanelWidth * static_cast<double>(std::max<std::size_t>(1, c.panels.size())) + kMargin; }
double height_of(const BarChart& c) { return kTop + kRowHeight * static_cast<double>(c.rows.size()) + kBottom; }

void text(cairo_t* cr, double x, double y, const std::string& s, double size, bool bold = false, bool right = false) {
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, right ? x - e.x_advance : x, y);
  cairo_show_text(cr, s.c_str());
}

void draw(cairo_t* cr, const BarChart& c) {
  const double h = height_of(c);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  text(cr, kMargin, 24, c.title, 15, true);
  cairo_set_source_rgb(cr, 0.35, 0.35, 0.35);
  text(cr, kMargin, 44, c.subtitle, 10.5);
  // Row labels, with a light band on every other row.
  for (std::size_t r = 0; r < c.rows.size(); ++r) {
    const double y = kTop + kRowHeight * static_cast<double>(r);
    if (r % 2 == 1) {
      cairo_set_source_rgb(cr, 0.96, 0.96, 0.96);
      cairo_rectangle(cr, 0, y, width_of(c), kRowHeight);
      cairo_fill(cr);
    }
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text(cr, kLabelWidth - 10, y + kRowHeight * 0.65, c.rows[r].label, 11, false, /*right=*/true);
  }
  for (std::size_t p = 0; p < c.panels.size(); ++p) {
    const BarChartPanel& panel = c.panels[p];
    const double x0 = kLabelWidth + kPanelWidth * static_cast<double>(p), plot = kPanelWidth - 70;
    double top = panel.reference;
    for (const auto& row : c.rows) {
      if (p < row.values.size()) top = std::max(top, row.values[p]);
      if (p < row.highs.size()) top = std::max(top, row.highs[p]);
    }
    top = top <= 0 || !std::isfinite(top) ? 1 : top * 1.05;
    const auto x_of = [&](double v) { return x0 + plot * std::clamp(v / top, 0.0, 1.0); };
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text(cr, x0, kTop - 16, panel.title, 11.5, true);
    // Axis with ticks at steps of 0.5 (or 1 when wide).
    const double step = top > 4 ? 1.0 : 0.5;
    cairo_set_line_width(cr, 1);
    for (double v = 0; v <= top + 1e-9; v += step) {
      cairo_set_source_rgb(cr, 0.85, 0.85, 0.85);
      cairo_move_to(cr, x_of(v), kTop);
      cairo_line_to(cr, x_of(v), h - kBottom);
      cairo_stroke(cr);
      cairo_set_source_rgb(cr, 0.35, 0.35, 0.35);
      text(cr, x_of(v) - 8, h - kBottom + 14, fmt::format("{:g}x", v), 9);
    }
    for (std::size_t r = 0; r < c.rows.size(); ++r) {
      const BarChartRow& row = c.rows[r];
      const double y = kTop + kRowHeight * static_cast<double>(r);
      const double v = p < row.values.size() ? row.values[p] : -1;
      if (v >= 0) {
        if (v >= panel.reference) cairo_set_source_rgb(cr, 0.20, 0.50, 0.75);
        else cairo_set_source_rgb(cr, 0.85, 0.45, 0.25);
        cairo_rectangle(cr, x0, y + 5, x_of(v) - x0, kRowHeight - 10);
        cairo_fill(cr);
        const double lo = p < row.lows.size() ? row.lows[p] : -1, hi = p < row.highs.size() ? row.highs[p] : -1;
        if (lo >= 0 && hi >= lo) {  // the spread
          cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
          cairo_set_line_width(cr, 1.2);
          const double ym = y + kRowHeight / 2;
          cairo_move_to(cr, x_of(lo), ym);
          cairo_line_to(cr, x_of(hi), ym);
          cairo_move_to(cr, x_of(lo), ym - 4);
          cairo_line_to(cr, x_of(lo), ym + 4);
          cairo_move_to(cr, x_of(hi), ym - 4);
          cairo_line_to(cr, x_of(hi), ym + 4);
          cairo_stroke(cr);
        }
      }
      cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
      const std::string note = p < row.notes.size() ? row.notes[p] : std::string();
      text(cr, (v >= 0 ? std::max(x_of(v), p < row.highs.size() && row.highs[p] > 0 ? x_of(row.highs[p]) : 0.0) : x0) + 5, y + kRowHeight * 0.65, note, 9.5);
    }
    // The reference line, dashed, over the bars.
    const double dash[] = {4, 3};
    cairo_set_dash(cr, dash, 2, 0);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    cairo_set_line_width(cr, 1.2);
    cairo_move_to(cr, x_of(panel.reference), kTop - 4);
    cairo_line_to(cr, x_of(panel.reference), h - kBottom);
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
  }
}

cairo_status_t append(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

void check_status(cairo_status_t status, const std::filesystem::path& path) {
  BELLOWS_CHECK_RESOURCE(status == CAIRO_STATUS_SUCCESS, fmt::format("drawing {}: cairo: {}", path.string(), cairo_status_to_string(status)),
                         "check the free memory");
}

}  // namespace

void write_bar_chart_svg(const BarChart& chart, const std::filesystem::path& path) {
  std::string bytes;
  cairo_surface_t* surface = cairo_svg_surface_create_for_stream(append, &bytes, width_of(chart), height_of(chart));
  cairo_t* cr = cairo_create(surface);
  draw(cr, chart);
  const cairo_status_t status = cairo_status(cr);
  cairo_destroy(cr);
  cairo_surface_finish(surface);  // flushes the SVG into `bytes`
  cairo_surface_destroy(surface);
  check_status(status, path);
  write_file_atomically(path, bytes);
}

void write_bar_chart_png(const BarChart& chart, const std::filesystem::path& path) {
  constexpr double kScale = 2;  // crisp on high-density screens
  cairo_surface_t* surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, static_cast<int>(std::ceil(width_of(chart) * kScale)),
                                                        static_cast<int>(std::ceil(height_of(chart) * kScale)));
  cairo_t* cr = cairo_create(surface);
  cairo_scale(cr, kScale, kScale);
  draw(cr, chart);
  cairo_status_t status = cairo_status(cr);
  cairo_destroy(cr);
  std::string bytes;
  if (status == CAIRO_STATUS_SUCCESS) status = cairo_surface_write_to_png_stream(surface, append, &bytes);
  cairo_surface_destroy(surface);
  check_status(status, path);
  write_file_atomically(path, bytes);
}

}  // namespace bellows::obs
