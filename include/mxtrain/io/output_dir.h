// mxtrain/io/output_dir.h — the output directories a user names (quantize --out-dir,
// prepare-data --out, export --out, import --out): replaced as a whole and atomically
// (AtomicDir), but never taking with them what mxtrain did not write there.
//
// Each such directory holds a manifest, `.mxtrain-manifest` (JSON: the command that wrote the
// directory and the names it wrote). Replacing the directory drops the names of the old
// manifest and carries every other entry — a model card README.md beside an export, notes, a
// subdirectory — into the new one, as hard links (copies where the file system refuses a
// link), made before the swap: at every moment each of those entries is in place, in the old
// directory or the new one. A non-empty directory without a manifest was not written by
// mxtrain (or by a version before manifests): it is refused, naming what it holds, rather
// than emptied.
#pragma once

#include <string>

#include "mxtrain/io/atomic_file.h"

namespace mxtrain::io {

constexpr const char* kOutputManifest = ".mxtrain-manifest";

// Start-up check, before any work: `path` can be replaced by the command — it does not
// exist, is empty, or holds a manifest (its other entries will be carried over). Throws
// naming `flag` otherwise. Writes nothing.
void check_replaceable_dir(const std::string& path, const std::string& flag);

// Commits `out` (an AtomicDir on the user's directory) as an output of `written_by`
// ("mxtrain export"): writes the manifest of what out.path() holds, carries over the entries
// of an existing target that its manifest does not list, and renames the new directory into
// place. A carried-over name that the new output also writes is refused (nothing changes).
void commit_output_dir(AtomicDir& out, const std::string& flag, const std::string& written_by);

}  // namespace mxtrain::io
