#include "sandbox/remove_tree.hpp"

#include <cstdio>
#include <ftw.h>

namespace kiln {

void remove_tree(const std::string& path) {
  nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        ::remove(p);
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

} // namespace kiln
