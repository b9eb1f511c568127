// io/remote_zip_reader: what ZipArchive reads of a zip in S3 or behind HTTP(S) -- a remote .pt
// (torch.save's zip: `model.pt`, HF's `pytorch_model.bin`).
//
// minizip walks a zip a few bytes at a time: the end record, the central directory, then each
// record's local header, which lies just before the record's data, all over the file. Read on
// demand that is a round trip per record, one after another (a 300-tensor state dict at 50 ms:
// 15 s to list it). So the reader first fetches the file's tail, the central directory where the
// tail does not hold it, and every local header the directory points to (16 requests at a time,
// headers less than 256 KiB apart in one); minizip then walks memory, and what else it reads
// (data.pkl, a record's bytes) is a range read.
#pragma once

#include <memory>

#include "io/zip_archive.h"

namespace stoker {

class RemoteObject;

// A ZipArchive reader over `object` (kept alive by the reader). A directory it cannot make sense
// of is not an error here: minizip then reads on demand and says what is wrong.
ZipReadAt remoteZipReader(std::shared_ptr<const RemoteObject> object);

}  // namespace stoker
