#include "cli/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace kvlm::cli {

namespace {
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, std::fabs(v) >= 100 || v == 0 ? "%.0f" : std::fabs(v) >= 1 ? "%.1f" : "%.3f", v);
  return buf;
}
}  // namespace

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<Series>& series) {
  const double W = 800, H = 500, L = 80, R = 30, T = 50, B = 60;
  double xmax = 1, ymax = 1e-9;
  for (const Series& s : series) {
    for (double x : s.x) xmax = std::max(xmax, x);
    for (double y : s.y) ymax = std::max(ymax, y);
  }
  ymax *= 1.05;
  auto px = [&](double x) { return L + (W - L - R) * x / xmax; };
  auto py = [&](double y) { return H - B - (H - T - B) * y / ymax; };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">" << title << "</text>\n";
  for (int i = 0; i <= 5; ++i) {  // grid and tick labels
    double yv = ymax * i / 5, xv = xmax * i / 5;
    o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << py(yv) << "\" y2=\"" << py(yv)
      << "\" stroke=\"#ddd\"/>\n<text x=\"" << L - 8 << "\" y=\"" << py(yv) + 4 << "\" text-anchor=\"end\">"
      << num(yv) << "</text>\n<text x=\"" << px(xv) << "\" y=\"" << H - B + 20 << "\" text-anchor=\"middle\">"
      << num(xv) << "</text>\n";
  }
  o << "<line x1=\"" << L << "\" x2=\"" << L << "\" y1=\"" << T << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n"
    << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << H - B << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n"
    << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 15 << "\" text-anchor=\"middle\">" << x_label << "</text>\n"
    << "<text transform=\"translate(20," << (T + H - B) / 2 << ") rotate(-90)\" text-anchor=\"middle\">" << y_label
    << "</text>\n";
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2.5\" points=\"";
    for (size_t i = 0; i < s.x.size(); ++i) o << px(s.x[i]) << "," << py(s.y[i]) << " ";
    o << "\"/>\n";
    for (size_t i = 0; i < s.x.size(); ++i)
      o << "<circle cx=\"" << px(s.x[i]) << "\" cy=\"" << py(s.y[i]) << "\" r=\"3\" fill=\"" << s.color << "\"/>\n";
    double ly = T + 20 + 22 * k;
    o << "<line x1=\"" << L + 20 << "\" x2=\"" << L + 50 << "\" y1=\"" << ly << "\" y2=\"" << ly << "\" stroke=\""
      << s.color << "\" stroke-width=\"3\"/>\n<text x=\"" << L + 58 << "\" y=\"" << ly + 4 << "\">" << s.label
      << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace kvlm::cli
