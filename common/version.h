// The version every dapple binary prints for --version.
// Thread safety: thread-safe (a constant).
#ifndef DAPPLE_COMMON_VERSION_H_
#define DAPPLE_COMMON_VERSION_H_

namespace dapple {

// "dapple 0.1.0 (git 62303cd)": the project's VERSION (CMakeLists.txt) and the commit the binary
// was built from, with ", modified" when the tree had uncommitted changes to tracked files; the
// version alone when built outside a git checkout. Defined in a file generated at build time
// (cmake/version_info.cmake). Static storage; never null.
const char* VersionString();

}  // namespace dapple

#endif  // DAPPLE_COMMON_VERSION_H_
