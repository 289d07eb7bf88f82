package gpustandin

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// The nvidia-smi stand-in: `nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits]`
// for the five fields `kubectl tao top` asks for, over the devices in NVIDIA_VISIBLE_DEVICES.
// Errors print nvidia-smi's own messages on stdout (where it prints them) with its documented
// exit codes: 2 for a bad argument, 6 when no device is found.

// NvidiaSMIValuesFile is where a test's script writes what the container's GPUs show, in the
// format ParseValues reads; without it every GPU is idle.
const NvidiaSMIValuesFile = "/tmp/nvidia-smi-stand-in"

// Exit codes of nvidia-smi (its man page, RETURN VALUE).
const (
	smiExitInvalidArg = 2
	smiExitNotFound   = 6
	smiExitOther      = 255
)

const smiHelpHint = "Please run 'nvidia-smi -h' for help."

// smiFields are the query fields the stand-in knows, with their CSV header (the unit stays in
// the header under nounits, as nvidia-smi keeps it) and value.
var smiFields = map[string]struct {
	header string
	value  func(index int, uuid string, v Values) (string, string) // bare value and its unit
}{
	"index":           {"index", func(i int, _ string, _ Values) (string, string) { return strconv.Itoa(i), "" }},
	"uuid":            {"uuid", func(_ int, u string, _ Values) (string, string) { return u, "" }},
	"utilization.gpu": {"utilization.gpu [%]", func(_ int, _ string, v Values) (string, string) { return strconv.Itoa(int(v.Util + 0.5)), " %" }},
	"memory.used":     {"memory.used [MiB]", func(_ int, _ string, v Values) (string, string) { return strconv.Itoa(v.MemUsedMiB), " MiB" }},
	"memory.total":    {"memory.total [MiB]", func(int, string, Values) (string, string) { return strconv.Itoa(FBTotalMiB), " MiB" }},
}

// NvidiaSMI runs the stand-in: args without the program name, visible the container's
// NVIDIA_VISIBLE_DEVICES, v what every visible GPU shows. It writes to stdout and returns the
// exit code.
func NvidiaSMI(args []string, visible string, v Values, stdout io.Writer) int {
	var query, format string
	var haveQuery, haveFormat bool
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		switch name {
		case "-h", "--help":
			if hasVal {
				break
			}
			fmt.Fprintln(stdout, "nvidia-smi stand-in (kubectl-tao test image): only --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total --format=csv[,noheader][,nounits] is simulated.")
			return 0
		case "--query-gpu", "--format":
			if !hasVal {
				if i+1 >= len(args) || strings.HasPrefix(args[i+1], "-") {
					fmt.Fprintf(stdout, "ERROR: Option %s is missing its value. %s\n", name, smiHelpHint)
					return smiExitInvalidArg
				}
				i++
				val = args[i]
			}
			if name == "--query-gpu" {
				if haveQuery {
					fmt.Fprintf(stdout, "Invalid combination of input arguments. %s\n", smiHelpHint)
					return smiExitInvalidArg
				}
				query, haveQuery = val, true
			} else {
				if haveFormat {
					fmt.Fprintf(stdout, "Invalid combination of input arguments. %s\n", smiHelpHint)
					return smiExitInvalidArg
				}
				format, haveFormat = val, true
			}
			continue
		}
		if strings.HasPrefix(a, "-") {
			fmt.Fprintf(stdout, "ERROR: Option %s is not recognized. %s\n", a, smiHelpHint)
		} else {
			fmt.Fprintf(stdout, "Invalid combination of input arguments. %s\n", smiHelpHint)
		}
		return smiExitInvalidArg
	}
	if !haveQuery {
		if haveFormat {
			fmt.Fprintf(stdout, "Invalid combination of input arguments. %s\n", smiHelpHint)
			return smiExitInvalidArg
		}
		// nvidia-smi alone prints its summary table, which the stand-in does not draw.
		fmt.Fprintln(stdout, "nvidia-smi stand-in (kubectl-tao test image): the summary table is not simulated; use --query-gpu=... --format=csv")
		return smiExitOther
	}
	if !haveFormat {
		fmt.Fprintf(stdout, "\"--format=\" switch is missing. %s\n", smiHelpHint)
		return smiExitInvalidArg
	}
	var csv, noheader, nounits bool
	for _, opt := range strings.Split(format, ",") {
		switch strings.TrimSpace(opt) {
		case "csv":
			csv = true
		case "noheader":
			noheader = true
		case "nounits":
			nounits = true
		default:
			fmt.Fprintf(stdout, "Invalid combination of input arguments. %s\n", smiHelpHint)
			return smiExitInvalidArg
		}
	}
	if !csv {
		fmt.Fprintf(stdout, "Invalid combination of input arguments. %s\n", smiHelpHint)
		return smiExitInvalidArg
	}
	fields := strings.Split(query, ",")
	for i, f := range fields {
		fields[i] = strings.TrimSpace(f)
		if _, ok := smiFields[fields[i]]; !ok {
			fmt.Fprintf(stdout, "Field \"%s\" is not a valid field to query.\n", fields[i])
			return smiExitInvalidArg
		}
	}
	ids := SplitIDs(visible)
	switch strings.TrimSpace(visible) {
	case "void", "none", "all":
		// No device list the stand-in could show: the device plugin always names devices.
		ids = nil
	}
	if len(ids) == 0 {
		fmt.Fprintln(stdout, "No devices were found")
		return smiExitNotFound
	}
	// nvidia-smi numbers a container's GPUs in PCI bus order, which the node's device IDs
	// sort in, whatever order the variable lists them.
	sort.Strings(ids)
	if !noheader {
		headers := make([]string, len(fields))
		for i, f := range fields {
			headers[i] = smiFields[f].header
		}
		fmt.Fprintln(stdout, strings.Join(headers, ", "))
	}
	for idx, id := range ids {
		cols := make([]string, len(fields))
		for i, f := range fields {
			val, unit := smiFields[f].value(idx, id, v)
			if !nounits {
				val += unit
			}
			cols[i] = val
		}
		fmt.Fprintln(stdout, strings.Join(cols, ", "))
	}
	return 0
}
