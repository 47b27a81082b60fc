// mxtrain/io/checksum.h — CRC-32 (IEEE 802.3, the zlib/PNG/gzip polynomial) for file
// integrity checks.
//
// Checkpoints record the CRC-32 and size of every data file in state.json; loading
// recomputes them, so a truncated or bit-flipped file is reported by name instead of
// being trained on. crc32_ref is the bit-serial definition; crc32 is the table-driven
// slicing-by-8 version tested against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mxtrain::io {

// Running CRC: start from 0, feed chunks in order; crc32_update(0, all) == crc32(all).
uint32_t crc32_update(uint32_t crc, const void* data, size_t size);
inline uint32_t crc32(const void* data, size_t size) { return crc32_update(0, data, size); }
// Bit-at-a-time reference (slow).
uint32_t crc32_ref(const void* data, size_t size);

// Lower-case 8-digit hex, e.g. "cbf43926".
std::string crc32_hex(uint32_t crc);

}  // namespace mxtrain::io
