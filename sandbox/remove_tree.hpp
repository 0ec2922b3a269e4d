// Removes a folder and everything beneath it (symlinks are removed, not followed). Not
// std::filesystem::remove_all: LibTorch 2.11 exports its own copy of that symbol, which interposes
// on libstdc++'s and calls a null pointer once it meets a subdirectory (it crashed the pool on the
// H200 when a cuda executor's scratch held the driver's ~/.nv cache).
#pragma once

#include <string>

namespace kiln {

void remove_tree(const std::string& path);

} // namespace kiln
