package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// maxSafetensorsHeader bounds the JSON header a .safetensors file may declare, as the format's
// own reader does: a larger length is a file cut short or not the format at all.
const maxSafetensorsHeader = 100 << 20

// zipMagic opens every zip archive, which is what torch.save writes (and Lightning's .ckpt,
// which is torch.save's).
var zipMagic = []byte("PK\x03\x04")

// cutShort says why a file written by the usual checkpoint writers is incomplete, or "" when
// nothing shows it is. A process killed while it saves (an OOM kill, a SIGTERM it does not
// handle, a crashed worker) leaves a truncated file whose close looks like any other, so the
// content is what tells: a torch.save zip ends with its central directory, a .safetensors
// file is exactly as long as its header says. A format it cannot check passes.
func cutShort(r io.ReaderAt, name string, size int64) string {
	head := make([]byte, 8)
	n, _ := r.ReadAt(head, 0)
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, zipMagic):
		// Reads only the end record and the central directory, not the tensors.
		if _, err := zip.NewReader(r, size); err != nil {
			return fmt.Sprintf("a zip file (torch.save) without a readable central directory (%v)", err)
		}
	case strings.HasSuffix(name, ".safetensors"):
		return safetensorsCutShort(r, head, size)
	}
	return ""
}

// safetensorsCutShort checks a .safetensors file: 8 bytes of little-endian header length, the
// JSON header, then the tensors, whose data_offsets must end exactly at the end of the file.
func safetensorsCutShort(r io.ReaderAt, head []byte, size int64) string {
	if len(head) < 8 {
		return "a .safetensors file shorter than its 8-byte header length"
	}
	hlen := binary.LittleEndian.Uint64(head)
	if hlen > maxSafetensorsHeader || int64(hlen) > size-8 {
		return fmt.Sprintf("a .safetensors file of %d bytes whose header says it is %d bytes long", size, hlen)
	}
	raw := make([]byte, hlen)
	if _, err := r.ReadAt(raw, 8); err != nil {
		return fmt.Sprintf("a .safetensors file whose header cannot be read (%v)", err)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw, &header); err != nil {
		return fmt.Sprintf("a .safetensors file whose header is not JSON (%v)", err)
	}
	var end uint64
	for name, v := range header {
		if name == "__metadata__" {
			continue
		}
		var t struct {
			DataOffsets [2]uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(v, &t); err != nil {
			return fmt.Sprintf("a .safetensors file whose tensor %q is not described (%v)", name, err)
		}
		end = max(end, t.DataOffsets[1])
	}
	if want := uint64(size) - 8 - hlen; end != want {
		return fmt.Sprintf("a .safetensors file with %d bytes of tensors where its header describes %d", want, end)
	}
	return ""
}
