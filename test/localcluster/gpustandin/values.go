// Package gpustandin holds what the real node's GPU stand-ins share: the dcgm-exporter stand-in
// (cmd/dcgmstandin), the nvidia-smi stand-in (cmd/nvidiasmi) and the launcher that writes their
// values. There is no GPU behind the real node's devices, so tests say what each GPU shows
// through small key=value files, and the stand-ins answer in the real tools' formats. It
// imports only the standard library, so the programs stay small static binaries.
package gpustandin

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The simulated GPU: an H100 80GB HBM3 on driver 580.95.05, what the real node's GPU Feature
// Discovery labels say it carries.
const (
	ModelName     = "NVIDIA H100 80GB HBM3"
	DriverVersion = "580.95.05"
	// FBTotalMiB is the framebuffer an H100 80GB reports (nvidia-smi's memory.total).
	FBTotalMiB = 81559
	// FBReservedMiB is what the driver keeps for itself: DCGM reports it apart, so
	// used + free + reserved = total.
	FBReservedMiB = 512
)

// Values is what one GPU shows: utilization in percent, framebuffer used in MiB and the last
// Xid error (0: none).
type Values struct {
	Util       float64
	MemUsedMiB int
	Xid        int
}

// Keys of the values file, one key=value a line.
const (
	KeyUtil    = "util"
	KeyMemUsed = "mem_used_mib"
	KeyXid     = "xid"
)

// ParseValues reads a values file: `util=97`, `mem_used_mib=70000`, `xid=79`, one a line. A
// missing key, or one whose value does not parse, is 0; blank lines, `#` comments and other
// keys are ignored, so a half-edited file never stops a scrape.
func ParseValues(data []byte) Values {
	var v Values
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case KeyUtil:
			if f, err := strconv.ParseFloat(val, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				v.Util = math.Max(0, math.Min(100, f))
			}
		case KeyMemUsed:
			if n, err := strconv.Atoi(val); err == nil && n >= 0 {
				v.MemUsedMiB = n
			}
		case KeyXid:
			if n, err := strconv.Atoi(val); err == nil && n >= 0 {
				v.Xid = n
			}
		}
	}
	return v
}

// Format writes v as a values file ParseValues reads back.
func (v Values) Format() []byte {
	return fmt.Appendf(nil, "%s=%s\n%s=%d\n%s=%d\n", KeyUtil, strconv.FormatFloat(v.Util, 'f', -1, 64), KeyMemUsed, v.MemUsedMiB, KeyXid, v.Xid)
}

// FreeMiB is the framebuffer left: total minus reserved minus used, never below 0.
func (v Values) FreeMiB() int {
	return max(0, FBTotalMiB-FBReservedMiB-v.MemUsedMiB)
}
