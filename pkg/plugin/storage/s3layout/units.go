package s3layout

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A checkpoint is the unit its framework writes: one file (TAO, torch.save, Lightning), or one
// directory of files (HuggingFace's Trainer, DeepSpeed, Megatron-LM, torch.distributed.checkpoint,
// a sharded safetensors save, a directory a user's pattern names). A unit is kept, retained,
// restored and resumed from whole, and only once its framework has marked it complete: a save
// cut short is never resumed from, the one before it is.
//
// Where the mark is, by layout (each taken from the framework's own save code):
//
//   - file: the file closed after writing, and its content whole (a torch.save zip ends with
//     its central directory, a .safetensors file is as long as its header says): the uploader
//     checks both before it keeps the file.
//   - huggingface, checkpoint-<N>/: trainer_state.json in it. Trainer._save_checkpoint writes
//     the model, the optimizer, the scheduler and the RNG state, and the trainer state last
//     (releases that stage in tmp-checkpoint-<N>/ rename it into place after the same writes).
//   - deepspeed, <tag>/ holding *_model_states.pt or *_optim_states.pt: the `latest` file beside
//     it naming the tag. DeepSpeedEngine.save_checkpoint writes it on rank 0 after every
//     file of the tag (save_latest).
//   - megatron, iter_<7 digits>/: latest_checkpointed_iteration.txt beside it naming the
//     iteration, written by rank 0 after every rank saved (checkpointing.save_checkpoint).
//   - torch.distributed.checkpoint, a directory holding .metadata or *.distcp files: .metadata,
//     which the coordinator writes last (FileSystemWriter.finish).
//   - safetensors shards, <name>-<k>-of-<n>.safetensors: all n shards and
//     <name>.safetensors.index.json.
//   - directory, a directory a --checkpoint-pattern ending in "/" names: once renamed into
//     place, or once it stopped changing (the uploader decides, and records it as sealed).
//
// Markers beside a unit (DeepSpeed's `latest`, Megatron's tracker file) name one unit at a
// time; the uploader reads each version it keeps and records the unit it names as sealed in
// the rank's manifest, so that an older unit stays complete once the marker has moved on and
// a unit the marker never named (a save cut short, left behind by an earlier attempt) never is.

// Layout is the kind of a checkpoint unit.
type Layout string

// The layouts known by name.
const (
	LayoutFile        Layout = "file"
	LayoutHuggingFace Layout = "huggingface"
	LayoutDeepSpeed   Layout = "deepspeed"
	LayoutMegatron    Layout = "megatron"
	LayoutDCP         Layout = "torch.distributed.checkpoint"
	LayoutShards      Layout = "safetensors-shards"
	LayoutDirectory   Layout = "directory"
)

// Marker file names.
const (
	// HFTrainerState is the file Trainer writes last into checkpoint-<N>/.
	HFTrainerState = "trainer_state.json"
	// DeepSpeedLatest names the newest complete tag beside the tags.
	DeepSpeedLatest = "latest"
	// MegatronTracker names the newest complete iteration beside the iter_ directories.
	MegatronTracker = "latest_checkpointed_iteration.txt"
)

var (
	hfDir       = regexp.MustCompile(`^checkpoint-[0-9]+$`)
	megatronDir = regexp.MustCompile(`^iter_[0-9]{7}$`)
	// A DeepSpeed tag holds its model and (ZeRO) optimizer states under these names
	// (engine._get_ckpt_name, _get_zero_ckpt_name).
	deepSpeedFile = regexp.MustCompile(`_(model|optim)_states\.pt$`)
	shardFile     = regexp.MustCompile(`^(.+)-([0-9]{5})-of-([0-9]{5})\.safetensors$`)
	shardIndex    = regexp.MustCompile(`^(.+)\.safetensors\.index\.json$`)
)

// MarkerOf is the unit a marker file names, given its content, and false for a file that is no
// marker (or a content that names nothing): DeepSpeed's `latest` names <dir>/<tag>, Megatron's
// tracker <dir>/iter_<7 digits> (or <dir>/release).
func MarkerOf(rel string, content []byte) (string, bool) {
	dir, name := path.Dir(rel), path.Base(rel)
	v := strings.TrimSpace(string(content))
	join := func(unit string) (string, bool) {
		p := path.Join(dir, unit)
		if ValidateCheckpointFile(p) != nil || path.Dir(p) != dir {
			return "", false
		}
		return p, true
	}
	switch name {
	case DeepSpeedLatest:
		if v == "" || strings.ContainsAny(v, "/\n") {
			return "", false
		}
		return join(v)
	case MegatronTracker:
		if v == "release" {
			return join(v)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return "", false
		}
		return join(fmt.Sprintf("iter_%07d", n))
	}
	return "", false
}

// IsMarker reports whether a file's name is that of a marker whose content names a unit.
func IsMarker(rel string) bool {
	n := path.Base(rel)
	return n == DeepSpeedLatest || n == MegatronTracker
}

// MaxMarkerSize bounds what is read of a marker file: a tag or a number.
const MaxMarkerSize = 4 << 10

// Unit is one checkpoint: its path below the checkpoint directory (the file, or the
// directory), its layout, its files, and whether it is complete.
type Unit struct {
	Path   string
	Layout Layout
	// Files are the unit's files, every rank's (a sharded save has a part per rank).
	Files []UnitFile
	// Written is its newest file's write time.
	Written time.Time
	// Complete: marked complete by its framework, and every rank that shards its layout has
	// its part kept.
	Complete bool
	// Ranks that hold a part of it.
	Ranks []int
}

// UnitFile is a file of a unit, and the rank that kept it.
type UnitFile struct {
	ManifestFile
	Rank int
}

// Size is the bytes of the unit's files.
func (u Unit) Size() int64 {
	var n int64
	for _, f := range u.Files {
		n += f.Size
	}
	return n
}

// ResumePath is what a framework's resume argument takes for the unit, below the checkpoint
// directory: the file (Lightning's ckpt_path, torch.load), the directory (HuggingFace's
// resume_from_checkpoint, torch.distributed.checkpoint, a user's directory), the directory
// holding the index of a sharded save (from_pretrained), or the load directory that holds the
// marker (DeepSpeed's and Megatron's load, which read the tag from it).
func (u Unit) ResumePath() string {
	switch u.Layout {
	case LayoutDeepSpeed, LayoutMegatron, LayoutShards:
		return path.Dir(u.Path)
	}
	return u.Path
}

// Marker is the marker file a restore writes so that the framework loads this unit (DeepSpeed's
// `latest`, Megatron's tracker), with its content; "" for a layout without one.
func (u Unit) Marker() (rel string, content string) {
	dir, name := path.Dir(u.Path), path.Base(u.Path)
	switch u.Layout {
	case LayoutDeepSpeed:
		return path.Join(dir, DeepSpeedLatest), name
	case LayoutMegatron:
		if name == "release" {
			return path.Join(dir, MegatronTracker), "release"
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(name, "iter_"))
		return path.Join(dir, MegatronTracker), strconv.Itoa(n)
	}
	return "", ""
}

// classify is the unit a file belongs to, and false for a file of no unit. The outermost
// directory unit wins (HuggingFace's Trainer under DeepSpeed writes a DeepSpeed tag inside
// checkpoint-<N>/); dirs are the directories of the rank's files that hold a DeepSpeed or a
// torch.distributed.checkpoint file directly.
func classify(rel string, patterns []string, dsDirs, dcpDirs map[string]bool) (string, Layout, bool) {
	segs := strings.Split(rel, "/")
	for i := 1; i < len(segs); i++ {
		dir := strings.Join(segs[:i], "/")
		name := segs[i-1]
		switch {
		case hfDir.MatchString(name):
			return dir, LayoutHuggingFace, true
		case megatronDir.MatchString(name):
			return dir, LayoutMegatron, true
		case dsDirs[dir]:
			return dir, LayoutDeepSpeed, true
		case dcpDirs[dir]:
			return dir, LayoutDCP, true
		case matchesDir(name, patterns):
			return dir, LayoutDirectory, true
		}
	}
	name := segs[len(segs)-1]
	if m := shardFile.FindStringSubmatch(name); m != nil {
		return path.Join(path.Dir(rel), m[1]+".safetensors.index.json"), LayoutShards, true
	}
	if m := shardIndex.FindStringSubmatch(name); m != nil {
		return rel, LayoutShards, true
	}
	if matchesFile(name, patterns) {
		return rel, LayoutFile, true
	}
	return "", "", false
}

// matchesDir: a pattern ending in "/" names a directory.
func matchesDir(name string, patterns []string) bool {
	for _, p := range patterns {
		if d, ok := strings.CutSuffix(p, "/"); ok {
			if m, _ := path.Match(d, name); m {
				return true
			}
		}
	}
	return false
}

func matchesFile(name string, patterns []string) bool {
	for _, p := range patterns {
		if strings.HasSuffix(p, "/") {
			continue
		}
		if m, _ := path.Match(p, name); m {
			return true
		}
	}
	return false
}

// part is one rank's share of a unit, as that rank's manifest holds it.
type part struct {
	path   string
	layout Layout
	files  []ManifestFile
	// marked: this rank's share carries the framework's mark (or the rank sealed it).
	marked bool
}

// rankParts groups one rank's files into unit parts, and the files of no unit. sealed are the
// units the rank recorded as sealed (a marker named them, or a user's directory settled).
func rankParts(files []ManifestFile, sealed []string, patterns []string) (parts map[string]*part, loose []ManifestFile) {
	dsDirs, dcpDirs := map[string]bool{}, map[string]bool{}
	for _, f := range files {
		d, n := path.Dir(f.Path), path.Base(f.Path)
		if d == "." {
			continue
		}
		if deepSpeedFile.MatchString(n) {
			dsDirs[d] = true
		}
		if n == DCPMetadata || strings.HasSuffix(n, ".distcp") {
			dcpDirs[d] = true
		}
	}
	isSealed := map[string]bool{}
	for _, s := range sealed {
		isSealed[s] = true
	}
	parts = map[string]*part{}
	for _, f := range files {
		p, layout, ok := classify(f.Path, patterns, dsDirs, dcpDirs)
		if !ok {
			loose = append(loose, f)
			continue
		}
		pt := parts[p]
		if pt == nil {
			pt = &part{path: p, layout: layout}
			parts[p] = pt
		}
		pt.files = append(pt.files, f)
	}
	for _, pt := range parts {
		pt.marked = isSealed[pt.path] || markedByFiles(pt)
	}
	return parts, loose
}

// markedByFiles is the mark a unit carries in its own files.
func markedByFiles(pt *part) bool {
	has := func(name string) bool {
		return slices.ContainsFunc(pt.files, func(f ManifestFile) bool { return f.Path == path.Join(pt.path, name) })
	}
	switch pt.layout {
	case LayoutFile:
		return true // kept only once closed and whole
	case LayoutHuggingFace:
		return has(HFTrainerState)
	case LayoutDCP:
		return has(DCPMetadata)
	case LayoutShards:
		return shardsWhole(pt.path, pt.files)
	}
	return false // deepspeed, megatron, directory: sealed only
}

// shardsWhole: the index and every one of the n shards it stands for.
func shardsWhole(index string, files []ManifestFile) bool {
	name := strings.TrimSuffix(path.Base(index), ".safetensors.index.json")
	have, total, hasIndex := map[int]bool{}, -1, false
	for _, f := range files {
		if f.Path == index {
			hasIndex = true
			continue
		}
		m := shardFile.FindStringSubmatch(path.Base(f.Path))
		if m == nil || m[1] != name {
			continue
		}
		k, _ := strconv.Atoi(m[2])
		n, _ := strconv.Atoi(m[3])
		if total >= 0 && n != total {
			return false
		}
		total = n
		have[k] = true
	}
	if !hasIndex || total < 1 {
		return false
	}
	for k := 1; k <= total; k++ {
		if !have[k] {
			return false
		}
	}
	return true
}

// group is where a sharded layout's units sit: a rank that keeps parts of some unit of a group
// keeps a part of each of them.
func group(p string, l Layout) string { return string(l) + "\x00" + path.Dir(p) }

// shardable: layouts whose mark may sit on another rank than a part (a shard per rank).
func shardable(l Layout) bool { return l != LayoutFile && l != LayoutShards }

// RunUnits are the checkpoint units of a run, from every rank's manifest, newest first (by
// write time, then path). A unit is complete when one rank's part carries its framework's mark
// and every rank that keeps parts of its layout in that directory (a rank that shards it)
// has its part: a rank that saves nothing (DDP's other ranks) is not waited for.
func RunUnits(manifests map[int]Manifest, patterns []string) []Unit {
	type acc struct {
		u      Unit
		marked bool
		ranks  map[int]bool
	}
	units := map[string]*acc{}
	sharding := map[string]map[int]bool{} // group -> ranks that keep parts in it
	for _, rank := range sortedRanks(manifests) {
		m := manifests[rank]
		parts, _ := rankParts(m.Files, m.Sealed, patterns)
		for _, pt := range parts {
			a := units[pt.path]
			if a == nil {
				a = &acc{u: Unit{Path: pt.path, Layout: pt.layout}, ranks: map[int]bool{}}
				units[pt.path] = a
			}
			a.marked = a.marked || pt.marked
			a.ranks[rank] = true
			for _, f := range pt.files {
				a.u.Files = append(a.u.Files, UnitFile{ManifestFile: f, Rank: rank})
				if f.Written.After(a.u.Written) {
					a.u.Written = f.Written
				}
			}
			if shardable(pt.layout) {
				g := group(pt.path, pt.layout)
				if sharding[g] == nil {
					sharding[g] = map[int]bool{}
				}
				sharding[g][rank] = true
			}
		}
	}
	out := make([]Unit, 0, len(units))
	for _, a := range units {
		u := a.u
		u.Complete = a.marked
		if u.Layout == LayoutShards {
			var all []ManifestFile
			for _, f := range u.Files {
				all = append(all, f.ManifestFile)
			}
			u.Complete = shardsWhole(u.Path, all)
		}
		if u.Complete && shardable(u.Layout) {
			for r := range sharding[group(u.Path, u.Layout)] {
				if !a.ranks[r] {
					u.Complete = false
				}
			}
		}
		for r := range a.ranks {
			u.Ranks = append(u.Ranks, r)
		}
		slices.Sort(u.Ranks)
		slices.SortFunc(u.Files, func(a, b UnitFile) int {
			if c := strings.Compare(a.Path, b.Path); c != 0 {
				return c
			}
			return a.Rank - b.Rank
		})
		out = append(out, u)
	}
	sortNewestFirst(out)
	return out
}

func sortNewestFirst(us []Unit) {
	slices.SortFunc(us, func(a, b Unit) int {
		if c := b.Written.Compare(a.Written); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
}

func sortedRanks(manifests map[int]Manifest) []int {
	ranks := make([]int, 0, len(manifests))
	for r := range manifests {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	return ranks
}

// ResumeUnit is the unit a new attempt resumes from, the same on every rank: the newest
// complete one of a run's units (RunUnits), and false when there is none (a first attempt).
func ResumeUnit(units []Unit) (Unit, bool) {
	for _, u := range units {
		if u.Complete {
			return u, true
		}
	}
	return Unit{}, false
}

// RestoreFile is one file of a restore: where it goes below the checkpoint directory, and the
// rank whose object it is.
type RestoreFile struct {
	ManifestFile
	Rank int
}

// RestorePlan is what a rank restores: every file of every complete unit (of units, the run's
// RunUnits), whichever rank kept it (a sharded unit is restored whole on every rank), and the
// files of no unit, the rank's own winning a clash, then the lower rank's. A unit that is not
// complete (a save cut short) is never restored. A file that cannot sit beside one that won
// (the same path as a directory, or below a file) is left out. In path order.
func RestorePlan(own int, manifests map[int]Manifest, units []Unit, patterns []string) []RestoreFile {
	ranks := []int{}
	if _, ok := manifests[own]; ok {
		ranks = append(ranks, own)
	}
	for _, r := range sortedRanks(manifests) {
		if r != own {
			ranks = append(ranks, r)
		}
	}
	files := map[string]bool{}
	dirs := map[string]bool{}
	var out []RestoreFile
	add := func(f ManifestFile, rank int) {
		if files[f.Path] || dirs[f.Path] {
			return
		}
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			if files[d] {
				return
			}
		}
		files[f.Path] = true
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		out = append(out, RestoreFile{ManifestFile: f, Rank: rank})
	}
	complete := map[string]bool{}
	for _, u := range units {
		complete[u.Path] = u.Complete
	}
	for _, r := range ranks {
		m := manifests[r]
		parts, loose := rankParts(m.Files, m.Sealed, patterns)
		for _, f := range loose {
			add(f, r)
		}
		for _, p := range sortedKeys(parts) {
			if !complete[p] {
				continue
			}
			for _, f := range parts[p].files {
				add(f, r)
			}
		}
	}
	slices.SortFunc(out, func(a, b RestoreFile) int { return strings.Compare(a.Path, b.Path) })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// RankUnits are one rank's units as its own manifest shows them (its parts, and whether they
// carry the mark), newest first: what retention and the uploader's notes work from.
func RankUnits(files []ManifestFile, sealed []string, patterns []string) []Unit {
	parts, _ := rankParts(files, sealed, patterns)
	out := make([]Unit, 0, len(parts))
	for _, pt := range parts {
		u := Unit{Path: pt.path, Layout: pt.layout, Complete: pt.marked}
		for _, f := range pt.files {
			u.Files = append(u.Files, UnitFile{ManifestFile: f})
			if f.Written.After(u.Written) {
				u.Written = f.Written
			}
		}
		out = append(out, u)
	}
	sortNewestFirst(out)
	return out
}

// Retain splits a rank's files by retention, unit by unit, never a unit in part:
//
//   - the newest keep units whose part here carries the mark stay, and so does every unit newer
//     than the newest of them (a save in flight);
//   - a unit older than that and never marked is a save cut short: it goes;
//   - where this rank keeps parts of a layout whose mark sits on another rank (its shards of a
//     sharded save), it keeps the newest keep+1 of them: the one more is the save whose mark the
//     other rank may not have written yet;
//   - protect (the unit the running attempt resumed from) and the files of no unit stay.
//
// sealed comes back without the units that went. keep must be at least 1.
func Retain(files []ManifestFile, sealed []string, patterns []string, keep int, protect string) (kept, drop []ManifestFile, keptSealed []string, err error) {
	if keep < 1 {
		return nil, nil, nil, fmt.Errorf("--checkpoint-keep must be 1 or more, got %d", keep)
	}
	units := RankUnits(files, sealed, patterns)
	markedIn := map[string]bool{}
	for _, u := range units {
		if u.Complete {
			markedIn[group(u.Path, u.Layout)] = true
		}
	}
	gone := map[string]bool{}
	seenMarked, seenShard := 0, map[string]int{}
	for _, u := range units {
		g := group(u.Path, u.Layout)
		switch {
		case u.Path == protect:
		case u.Complete:
			seenMarked++
			if seenMarked > keep {
				gone[u.Path] = true
			}
		case shardable(u.Layout) && !markedIn[g]:
			seenShard[g]++
			if seenShard[g] > keep+1 {
				gone[u.Path] = true
			}
		case seenMarked > 0:
			gone[u.Path] = true // older than a complete unit, never marked: cut short
		}
	}
	dropped := map[string]bool{}
	for _, u := range units {
		if !gone[u.Path] {
			continue
		}
		for _, f := range u.Files {
			dropped[f.Path] = true
		}
	}
	for _, f := range files {
		if dropped[f.Path] {
			drop = append(drop, f)
		} else {
			kept = append(kept, f)
		}
	}
	for _, s := range sealed {
		if !gone[s] {
			keptSealed = append(keptSealed, s)
		}
	}
	return kept, drop, keptSealed, nil
}

// BroadPatterns names the usual files that are not checkpoints which patterns would take for
// one each (a framework's config, its markers, logs): a pattern that broad makes every such
// file a checkpoint of its own, and retention would delete all but the newest few.
func BroadPatterns(patterns []string) []string {
	var out []string
	for _, name := range notCheckpoints {
		if matchesFile(name, patterns) {
			out = append(out, name)
		}
	}
	return out
}

// notCheckpoints are files training code writes beside its checkpoints.
var notCheckpoints = []string{
	"config.json", HFTrainerState, "training_args.bin", DeepSpeedLatest, MegatronTracker,
	"status.json", "train.log", "events.out.tfevents.0", "train.yaml", "tokenizer.json",
}
