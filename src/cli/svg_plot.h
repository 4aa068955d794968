// A minimal line chart written as SVG: enough to see O(n) against O(n^2) at a glance.
#pragma once
#include <string>
#include <vector>

namespace kvlm::cli {

struct Series {
  std::string label, color;
  std::vector<double> x, y;
};

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<Series>& series);

}  // namespace kvlm::cli
