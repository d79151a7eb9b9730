package replication

import "hash/crc32"

// castagnoli is the CRC-32C table of the frames' checksums. Combining checksums of concatenations
// (re-heading a large entry without a pass over its body) is internal/crc32c.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)
