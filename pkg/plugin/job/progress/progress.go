// Package progress reads TAO's status.json, the JSON lines rank 0 of a TAO PyTorch job appends to
// <results_dir>/status.json (nvidia_tao_pytorch/core/loggers/api_logging.py and
// core/callbacks/loggers.py), into the one summary `kubectl tao top` shows. It is a pure core: it
// folds bytes it is given and never reads a clock.
package progress

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Progress is what the newest lines of status.json say. Epoch and MaxEpoch are as TAO writes
// them: TAO 6's callback writes the zero-based index of the finished epoch and max_epochs-1,
// older ones a count and max_epochs, so they are shown, not reinterpreted.
type Progress struct {
	Epoch               *int     `json:"epoch,omitempty"`
	MaxEpoch            *int     `json:"maxEpoch,omitempty"`
	TimePerEpochSeconds *float64 `json:"timePerEpochSeconds,omitempty"`
	ETASeconds          *float64 `json:"etaSeconds,omitempty"`
	Status              string   `json:"status,omitempty"`
	// Message is the newest line's message, empty when it has none, so that it always goes with
	// Status.
	Message string `json:"message,omitempty"`
	// KPI holds the last value seen of each kpi entry and of each numeric "graphical" entry (some
	// models write their running loss there).
	KPI map[string]float64 `json:"kpi,omitempty"`
	// Time is when the newest line was written (date + time, read as UTC: TAO writes the
	// container's local time without a zone, and containers run in UTC unless told otherwise).
	Time *time.Time `json:"time,omitempty"`
	// EpochTime is when the line with the newest epoch was written, to tell a stalled job.
	EpochTime *time.Time `json:"epochTime,omitempty"`
}

// line is one status.json line; the epoch fields are raw because TAO versions write them as
// numbers or strings.
type line struct {
	Date         string                     `json:"date"`
	Time         string                     `json:"time"`
	Status       string                     `json:"status"`
	Message      string                     `json:"message"`
	KPI          map[string]json.RawMessage `json:"kpi"`
	Graphical    map[string]json.RawMessage `json:"graphical"`
	Epoch        json.RawMessage            `json:"epoch"`
	MaxEpoch     json.RawMessage            `json:"max_epoch"`
	TimePerEpoch json.RawMessage            `json:"time_per_epoch"`
	ETA          json.RawMessage            `json:"eta"`
}

// Parse folds the complete lines of a status.json tail, oldest first. The data may start mid-line
// (a tail read from an offset): its first line is dropped unless fromStart says the data starts at
// the file's beginning. The last line is ignored unless it ends in '\n', because rank 0 may be
// writing it. Lines that are not JSON objects are skipped. It returns nil, nil when no line is
// usable.
func Parse(data []byte, fromStart bool) (*Progress, error) {
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return nil, nil
	}
	data = data[:end]
	if !fromStart {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			// The only newline ends the partial first line: nothing complete follows it.
			return nil, nil
		}
		data = data[nl+1:]
	}
	var p *Progress
	for _, raw := range bytes.Split(data, []byte("\n")) {
		l, ok := decode(raw)
		if !ok {
			continue
		}
		if p == nil {
			p = &Progress{}
		}
		p.fold(l)
	}
	return p, nil
}

// decode reads one line; ok is false for a line that is no status object.
func decode(raw []byte) (line, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return line{}, false
	}
	var l line
	if err := json.Unmarshal(raw, &l); err != nil {
		// Python's json.dumps writes a NaN or infinite loss as a bare NaN/Infinity, which is not
		// JSON; read such a line with those values as null rather than lose its epoch.
		if err := json.Unmarshal(nonFiniteToNull(raw), &l); err != nil {
			return line{}, false
		}
	}
	if l.Status == "" && l.Date == "" && len(l.Epoch) == 0 && l.KPI == nil && l.Graphical == nil {
		return line{}, false
	}
	return l, true
}

// nonFiniteToNull replaces the bare NaN, Infinity and -Infinity tokens Python writes, outside
// strings, with null.
func nonFiniteToNull(raw []byte) []byte {
	var out []byte
	inString, escaped := false, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			out = append(out, c)
			continue
		}
		if c == '"' {
			inString = true
		}
		replaced := false
		for _, tok := range []string{"NaN", "-Infinity", "Infinity"} {
			if bytes.HasPrefix(raw[i:], []byte(tok)) {
				out = append(out, "null"...)
				i += len(tok) - 1
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, c)
		}
	}
	return out
}

func (p *Progress) fold(l line) {
	when, whenOK := lineTime(l.Date, l.Time)
	if whenOK {
		p.Time = &when
	}
	if l.Status != "" {
		p.Status = l.Status
	}
	p.Message = l.Message
	if epoch, ok := intField(l.Epoch); ok {
		p.Epoch = &epoch
		p.MaxEpoch = nil
		if m, ok := intField(l.MaxEpoch); ok {
			p.MaxEpoch = &m
		}
		p.TimePerEpochSeconds = durationField(l.TimePerEpoch)
		p.ETASeconds = durationField(l.ETA)
		p.EpochTime = nil
		if whenOK {
			p.EpochTime = &when
		}
	}
	for _, entries := range []map[string]json.RawMessage{l.KPI, l.Graphical} {
		for name, raw := range entries {
			var v *float64
			if json.Unmarshal(raw, &v) != nil {
				continue // a string or a list: no figure to show
			}
			if v == nil {
				// A NaN (read as null): an older value would pass for the current one.
				delete(p.KPI, name)
				continue
			}
			if p.KPI == nil {
				p.KPI = map[string]float64{}
			}
			p.KPI[name] = *v
		}
	}
}

// lineTime reads TAO's date ("M/D/YYYY") and time ("H:M:S", not zero-padded) as UTC.
func lineTime(date, clock string) (time.Time, bool) {
	t, err := time.Parse("1/2/2006 15:4:5", date+" "+clock)
	if err != nil {
		return time.Time{}, false
	}
	return t.UTC(), true
}

// intField reads an epoch field written as a number or as a numeric string.
func intField(raw json.RawMessage) (int, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		raw = json.RawMessage(strings.TrimSpace(s))
	}
	var f float64
	if json.Unmarshal(raw, &f) != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
		return 0, false
	}
	return int(f), true
}

// durationField reads time_per_epoch or eta: a Python timedelta string, or a number of seconds.
func durationField(raw json.RawMessage) *float64 {
	if len(raw) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		d, err := ParseTimedelta(s)
		if err != nil {
			return nil
		}
		secs := d.Seconds()
		return &secs
	}
	var f float64
	if json.Unmarshal(raw, &f) != nil || f < 0 {
		return nil
	}
	return &f
}

// maxDays keeps a timedelta within time.Duration (about 106751 days).
const maxDays = 100000

// ParseTimedelta reads Python's str(timedelta): "H:MM:SS", "H:MM:SS.ffffff", and either with a
// "D day, " or "D days, " prefix, D negative for a negative timedelta ("-1 day, 23:59:59" is
// one second before zero). That is how TAO writes time_per_epoch and eta.
func ParseTimedelta(s string) (time.Duration, error) {
	rest := strings.TrimSpace(s)
	var days int
	if head, clock, ok := strings.Cut(rest, ", "); ok {
		count, unit, ok := strings.Cut(head, " ")
		if !ok || (unit != "day" && unit != "days") {
			return 0, fmt.Errorf("timedelta %q: %q is not a number of days", s, head)
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < -maxDays || n > maxDays {
			return 0, fmt.Errorf("timedelta %q: %q is not a number of days", s, count)
		}
		days, rest = n, clock
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return 0, fmt.Errorf("timedelta %q is not H:MM:SS", s)
	}
	hours, err := strconv.Atoi(parts[0])
	// The sign of a timedelta is on its days; Atoi would take "-0" and "+1".
	if err != nil || hours > 24*maxDays || parts[0][0] < '0' || parts[0][0] > '9' {
		return 0, fmt.Errorf("timedelta %q: bad hours", s)
	}
	minutes, err := strconv.Atoi(parts[1])
	if err != nil || minutes < 0 || minutes > 59 || len(parts[1]) != 2 {
		return 0, fmt.Errorf("timedelta %q: bad minutes", s)
	}
	whole, frac, _ := strings.Cut(parts[2], ".")
	secs, err := strconv.Atoi(whole)
	if err != nil || secs < 0 || secs > 59 || len(whole) != 2 {
		return 0, fmt.Errorf("timedelta %q: bad seconds", s)
	}
	var nanos int
	if strings.Contains(parts[2], ".") {
		if frac == "" || len(frac) > 9 || strings.Trim(frac, "0123456789") != "" {
			return 0, fmt.Errorf("timedelta %q: bad fraction of a second", s)
		}
		nanos, _ = strconv.Atoi(frac + strings.Repeat("0", 9-len(frac)))
	}
	d := time.Duration(days)*24*time.Hour + time.Duration(hours)*time.Hour +
		time.Duration(minutes)*time.Minute + time.Duration(secs)*time.Second + time.Duration(nanos)
	return d, nil
}

// String is the progress column: "epoch 12/80", "epoch 12" without a max, else the status.
func (p *Progress) String() string {
	switch {
	case p == nil:
		return ""
	case p.Epoch != nil && p.MaxEpoch != nil:
		return fmt.Sprintf("epoch %d/%d", *p.Epoch, *p.MaxEpoch)
	case p.Epoch != nil:
		return fmt.Sprintf("epoch %d", *p.Epoch)
	}
	return p.Status
}

// ETAString is the ETA as a short human string ("2d03h", "1h02m", "4m05s", "41s"), "" when
// unknown.
func (p *Progress) ETAString() string {
	if p == nil || p.ETASeconds == nil || math.IsNaN(*p.ETASeconds) {
		return ""
	}
	secs := int64(math.Round(math.Max(0, math.Min(*p.ETASeconds, float64(maxDays)*86400))))
	switch {
	case secs >= 86400:
		return fmt.Sprintf("%dd%02dh", secs/86400, secs%86400/3600)
	case secs >= 3600:
		return fmt.Sprintf("%dh%02dm", secs/3600, secs%3600/60)
	case secs >= 60:
		return fmt.Sprintf("%dm%02ds", secs/60, secs%60)
	}
	return fmt.Sprintf("%ds", secs)
}
