#pragma once
// removeTree: what std::filesystem::remove_all(path, ec) does, through POSIX nftw.
//
// Why not remove_all itself: PyTorch's wheels (2.5 and later, pytorch/pytorch#133437) export the
// parts of libstdc++ they link statically, and the dynamic linker binds a program's call to the
// first library that defines the symbol. On torch 2.11 stoker-torch's remove_all ran libtorch.so's
// copy, which called through a null pointer at the end of every checkpoint conversion. A C function
// has no such twin.
#include <string>
#include <system_error>

namespace stoker {

// Removes `path` and, for a directory, everything under it without following symlinks. A path that
// does not exist is not an error. `ec` holds the first failure; what could be removed is removed.
void removeTree(const std::string& path, std::error_code& ec);

}  // namespace stoker
