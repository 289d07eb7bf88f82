package s3layout

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// rankFiles builds one rank's manifest files from "path@minute" entries.
func rankFiles(t *testing.T, rank int, entries ...string) []ManifestFile {
	t.Helper()
	var out []ManifestFile
	for _, e := range entries {
		p, m, _ := strings.Cut(e, "@")
		var minute int
		if _, err := fmt.Sscan(m, &minute); err != nil {
			t.Fatalf("entry %q: %v", e, err)
		}
		out = append(out, mf(t, rank, p, int64(len(p)), minute))
	}
	return out
}

type unitRow struct {
	Path     string
	Layout   Layout
	Files    int
	Complete bool
}

func unitRows(us []Unit) []unitRow {
	out := []unitRow{}
	for _, u := range us {
		out = append(out, unitRow{u.Path, u.Layout, len(u.Files), u.Complete})
	}
	return out
}

// Each layout, written in its framework's order, and cut short at its worst moment: the units
// found, which are complete, and the one a new attempt resumes from (as its framework's resume
// argument takes it).
func TestRunUnitsLayouts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ranks      map[int][]string
		sealed     map[int][]string
		patterns   []string
		want       []unitRow
		resume     string
		resumePath string
	}{
		{name: "first attempt", ranks: nil, want: []unitRow{}},
		{name: "TAO files, a cut-short file never reaches the manifest",
			ranks:  map[int][]string{0: {"model_epoch_001.pth@1", "model_epoch_002.tlt@2", "weights.hdf5@3", "status.json@4"}},
			want:   []unitRow{{"weights.hdf5", LayoutFile, 1, true}, {"model_epoch_002.tlt", LayoutFile, 1, true}, {"model_epoch_001.pth", LayoutFile, 1, true}},
			resume: "weights.hdf5", resumePath: "weights.hdf5"},
		{name: "torch.save and Lightning",
			ranks:  map[int][]string{0: {"step-5.pt@1", "epoch=1-step=10.ckpt@2", "last.ckpt@3"}},
			want:   []unitRow{{"last.ckpt", LayoutFile, 1, true}, {"epoch=1-step=10.ckpt", LayoutFile, 1, true}, {"step-5.pt", LayoutFile, 1, true}},
			resume: "last.ckpt", resumePath: "last.ckpt"},
		{name: "HuggingFace: the unit cut short after its model is not complete",
			ranks: map[int][]string{0: {
				"out/checkpoint-4/model.safetensors@1", "out/checkpoint-4/optimizer.pt@1", "out/checkpoint-4/scheduler.pt@1", "out/checkpoint-4/rng_state.pth@1", "out/checkpoint-4/trainer_state.json@2",
				"out/checkpoint-5/model.safetensors@3",
			}},
			want:   []unitRow{{"out/checkpoint-5", LayoutHuggingFace, 1, false}, {"out/checkpoint-4", LayoutHuggingFace, 5, true}},
			resume: "out/checkpoint-4", resumePath: "out/checkpoint-4"},
		{name: "HuggingFace sharded model inside the unit",
			ranks: map[int][]string{0: {
				"checkpoint-8/model-00001-of-00002.safetensors@1", "checkpoint-8/model-00002-of-00002.safetensors@1", "checkpoint-8/model.safetensors.index.json@1",
				"checkpoint-8/optimizer.pt@1", "checkpoint-8/trainer_state.json@2",
			}},
			want:   []unitRow{{"checkpoint-8", LayoutHuggingFace, 5, true}},
			resume: "checkpoint-8", resumePath: "checkpoint-8"},
		{name: "HuggingFace on two ranks: rank 1's RNG state is its part",
			ranks: map[int][]string{
				0: {"checkpoint-2/model.safetensors@1", "checkpoint-2/rng_state_0.pth@1", "checkpoint-2/trainer_state.json@2",
					"checkpoint-4/model.safetensors@5", "checkpoint-4/rng_state_0.pth@5", "checkpoint-4/trainer_state.json@6"},
				1: {"checkpoint-2/rng_state_1.pth@1"},
			},
			// checkpoint-4 lacks rank 1's part (its pod died before keeping it).
			want:   []unitRow{{"checkpoint-4", LayoutHuggingFace, 3, false}, {"checkpoint-2", LayoutHuggingFace, 4, true}},
			resume: "checkpoint-2", resumePath: "checkpoint-2"},
		{name: "DeepSpeed: a tag is complete once `latest` named it; the resume is the load directory",
			ranks: map[int][]string{
				0: {"ds/global_step5/mp_rank_00_model_states.pt@1", "ds/global_step5/zero_pp_rank_0_mp_rank_00_optim_states.pt@1", "ds/latest@2",
					"ds/global_step10/mp_rank_00_model_states.pt@3", "ds/global_step10/zero_pp_rank_0_mp_rank_00_optim_states.pt@3"},
				1: {"ds/global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt@1", "ds/global_step10/zero_pp_rank_1_mp_rank_00_optim_states.pt@3"},
			},
			sealed: map[int][]string{0: {"ds/global_step5"}},
			want:   []unitRow{{"ds/global_step10", LayoutDeepSpeed, 3, false}, {"ds/global_step5", LayoutDeepSpeed, 3, true}},
			resume: "ds/global_step5", resumePath: "ds"},
		{name: "Megatron: iter_ named by the tracker",
			ranks: map[int][]string{0: {
				"iter_0000002/mp_rank_00/model_optim_rng.pt@1", "iter_0000002/mp_rank_00/distrib_optim.pt@1", "latest_checkpointed_iteration.txt@2",
				"iter_0000004/mp_rank_00/model_optim_rng.pt@3", "iter_0000004/mp_rank_00/distrib_optim.pt@3", "latest_checkpointed_iteration.txt@4",
			}},
			sealed: map[int][]string{0: {"iter_0000002", "iter_0000004"}},
			want:   []unitRow{{"iter_0000004", LayoutMegatron, 2, true}, {"iter_0000002", LayoutMegatron, 2, true}},
			resume: "iter_0000004", resumePath: "."},
		{name: "torch.distributed.checkpoint: .metadata written last by the coordinator",
			ranks: map[int][]string{
				0: {"dcp/step-10/__0_0.distcp@1", "dcp/step-10/.metadata@2", "dcp/step-20/__0_0.distcp@5"},
				1: {"dcp/step-10/__1_0.distcp@1", "dcp/step-20/__1_0.distcp@5"},
			},
			want:   []unitRow{{"dcp/step-20", LayoutDCP, 2, false}, {"dcp/step-10", LayoutDCP, 3, true}},
			resume: "dcp/step-10", resumePath: "dcp/step-10"},
		{name: "safetensors shards with their index",
			ranks: map[int][]string{0: {
				"export/model-00001-of-00003.safetensors@1", "export/model-00002-of-00003.safetensors@1", "export/model-00003-of-00003.safetensors@1", "export/model.safetensors.index.json@2",
				"next/model-00001-of-00002.safetensors@5", "next/model.safetensors.index.json@5",
			}},
			want: []unitRow{{"next/model.safetensors.index.json", LayoutShards, 2, false},
				{"export/model.safetensors.index.json", LayoutShards, 4, true}},
			resume: "export/model.safetensors.index.json", resumePath: "export"},
		{name: "a user's directory pattern, sealed once renamed into place or settled",
			ranks:    map[int][]string{0: {"ckpt_1/a.bin@1", "ckpt_1/b.json@1", "ckpt_2/a.bin@4", "notes.txt@5"}},
			sealed:   map[int][]string{0: {"ckpt_1"}},
			patterns: []string{"ckpt_*/"},
			want:     []unitRow{{"ckpt_2", LayoutDirectory, 1, false}, {"ckpt_1", LayoutDirectory, 2, true}},
			resume:   "ckpt_1", resumePath: "ckpt_1"},
		{name: "DDP: rank 0 saves, rank 1 keeps nothing and is not waited for",
			ranks:  map[int][]string{0: {"checkpoint-3/model.safetensors@1", "checkpoint-3/trainer_state.json@2"}, 1: {"train.log@3"}},
			want:   []unitRow{{"checkpoint-3", LayoutHuggingFace, 2, true}},
			resume: "checkpoint-3", resumePath: "checkpoint-3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			manifests := map[int]Manifest{}
			for r, entries := range tc.ranks {
				manifests[r] = Manifest{Rank: r, Files: rankFiles(t, r, entries...), Sealed: tc.sealed[r]}
			}
			patterns := tc.patterns
			if patterns == nil {
				patterns = DefaultCheckpointPatterns
			}
			units := RunUnits(manifests, patterns)
			if got := unitRows(units); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("RunUnits =\n%+v\nwant\n%+v", got, tc.want)
			}
			u, ok := ResumeUnit(units)
			if u.Path != tc.resume || ok != (tc.resume != "") || ok && u.ResumePath() != tc.resumePath {
				t.Errorf("ResumeUnit = %q (resume path %q), %v; want %q (%q)", u.Path, u.ResumePath(), ok, tc.resume, tc.resumePath)
			}
		})
	}
}

func TestMarkers(t *testing.T) {
	for _, tc := range []struct {
		rel, content, want string
	}{
		{"ds/latest", "global_step10\n", "ds/global_step10"},
		{"latest", "my-tag", "my-tag"},
		{"ds/latest", "", ""},
		{"ds/latest", "../x", ""},
		{"ds/latest", "a/b", ""},
		{"latest_checkpointed_iteration.txt", "4\n", "iter_0000004"},
		{"m/latest_checkpointed_iteration.txt", "release", "m/release"},
		{"m/latest_checkpointed_iteration.txt", "-1", ""},
		{"m/latest_checkpointed_iteration.txt", "x", ""},
		{"other.txt", "4", ""},
	} {
		got, ok := MarkerOf(tc.rel, []byte(tc.content))
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("MarkerOf(%q, %q) = %q, %v; want %q", tc.rel, tc.content, got, ok, tc.want)
		}
	}
	// What a restore writes so that the framework loads the resumed unit.
	for _, tc := range []struct {
		u             Unit
		rel, contents string
	}{
		{Unit{Path: "ds/global_step5", Layout: LayoutDeepSpeed}, "ds/latest", "global_step5"},
		{Unit{Path: "iter_0000040", Layout: LayoutMegatron}, "latest_checkpointed_iteration.txt", "40"},
		{Unit{Path: "checkpoint-4", Layout: LayoutHuggingFace}, "", ""},
	} {
		if rel, c := tc.u.Marker(); rel != tc.rel || c != tc.contents {
			t.Errorf("Marker(%s) = %q %q; want %q %q", tc.u.Path, rel, c, tc.rel, tc.contents)
		}
		// The marker written names the unit back.
		if tc.rel != "" {
			if back, ok := MarkerOf(tc.rel, []byte(tc.contents)); !ok || back != tc.u.Path {
				t.Errorf("MarkerOf(Marker(%s)) = %q", tc.u.Path, back)
			}
		}
	}
}

// A restore brings back every file of every complete unit, whichever rank kept it, and the
// files of no unit; never a unit cut short.
func TestRestorePlan(t *testing.T) {
	type row struct {
		Path string
		Rank int
	}
	rows := func(p []RestoreFile) []row {
		out := []row{}
		for _, f := range p {
			out = append(out, row{f.Path, f.Rank})
		}
		return out
	}
	m := func(rank int, sealed []string, entries ...string) Manifest {
		return Manifest{Rank: rank, Files: rankFiles(t, rank, entries...), Sealed: sealed}
	}
	ds := map[int]Manifest{
		0: m(0, []string{"global_step5"}, "global_step5/mp_rank_00_model_states.pt@1", "latest@2", "global_step10/mp_rank_00_model_states.pt@3", "shared.txt@1", "x@1"),
		1: m(1, nil, "global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt@1", "global_step10/zero_pp_rank_1_mp_rank_00_optim_states.pt@3", "shared.txt@2", "x/y@1"),
	}
	for _, tc := range []struct {
		own  int
		in   map[int]Manifest
		want []row
	}{
		// Both ranks restore the whole complete tag, never the one cut short; the own rank's
		// loose file wins a clash, then the lower rank's; a file that cannot sit beside a winner
		// (below a file) is left out.
		{0, ds, []row{{"global_step5/mp_rank_00_model_states.pt", 0}, {"global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt", 1}, {"latest", 0}, {"shared.txt", 0}, {"x", 0}}},
		{1, ds, []row{{"global_step5/mp_rank_00_model_states.pt", 0}, {"global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt", 1}, {"latest", 0}, {"shared.txt", 1}, {"x/y", 1}}},
		// A rank with no manifest yet (a new rank) restores the others'.
		{2, ds, []row{{"global_step5/mp_rank_00_model_states.pt", 0}, {"global_step5/zero_pp_rank_1_mp_rank_00_optim_states.pt", 1}, {"latest", 0}, {"shared.txt", 0}, {"x", 0}}},
		{0, nil, []row{}},
	} {
		if got := rows(RestorePlan(tc.own, tc.in, RunUnits(tc.in, DefaultCheckpointPatterns), DefaultCheckpointPatterns)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("RestorePlan(rank %d) =\n%v\nwant\n%v", tc.own, got, tc.want)
		}
	}
}

// Retention per layout: whole units only, the newest keep complete ones, a save in flight, and
// the unit the attempt resumed from.
func TestRetainLayouts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    []string
		sealed   []string
		patterns []string
		keep     int
		protect  string
		drop     []string
	}{
		{name: "files", files: []string{"e1.pth@1", "e2.pth@2", "e3.pth@3", "train.log@0"}, keep: 2, drop: []string{"e1.pth"}},
		{name: "HuggingFace keeps every file of its two newest units",
			files: []string{
				"checkpoint-1/model.safetensors@1", "checkpoint-1/optimizer.pt@1", "checkpoint-1/trainer_state.json@1",
				"checkpoint-2/model.safetensors@2", "checkpoint-2/optimizer.pt@2", "checkpoint-2/trainer_state.json@2",
				"checkpoint-3/model.safetensors@3", "checkpoint-3/optimizer.pt@3", "checkpoint-3/trainer_state.json@3",
				"checkpoint-4/model.safetensors@4", // in flight
			},
			keep: 2, drop: []string{"checkpoint-1/model.safetensors", "checkpoint-1/optimizer.pt", "checkpoint-1/trainer_state.json"}},
		{name: "a unit cut short by an earlier attempt goes once a newer one is complete",
			files: []string{"checkpoint-5/model.safetensors@5", "checkpoint-4/model.safetensors@4", "checkpoint-4/trainer_state.json@4", "checkpoint-6/model.safetensors@6", "checkpoint-6/trainer_state.json@7"},
			keep:  2, drop: []string{"checkpoint-5/model.safetensors"}},
		{name: "Megatron keeps two iterations, not one",
			files: []string{
				"iter_0000002/mp_rank_00/model_optim_rng.pt@1", "iter_0000002/mp_rank_00/distrib_optim.pt@1",
				"iter_0000004/mp_rank_00/model_optim_rng.pt@3", "iter_0000004/mp_rank_00/distrib_optim.pt@3",
				"iter_0000006/mp_rank_00/model_optim_rng.pt@5", "iter_0000006/mp_rank_00/distrib_optim.pt@5",
				"latest_checkpointed_iteration.txt@6",
			},
			sealed: []string{"iter_0000002", "iter_0000004", "iter_0000006"},
			keep:   2, drop: []string{"iter_0000002/mp_rank_00/model_optim_rng.pt", "iter_0000002/mp_rank_00/distrib_optim.pt"}},
		{name: "the unit resumed from stays",
			files: []string{"e1.pth@1", "e2.pth@2", "e3.pth@3"}, keep: 1, protect: "e1.pth", drop: []string{"e2.pth"}},
		{name: "a rank's shards of a sharded save: one more than keep",
			files: []string{
				"ds/global_step1/zero_pp_rank_1_mp_rank_00_optim_states.pt@1", "ds/global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt@2",
				"ds/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt@3", "ds/global_step4/zero_pp_rank_1_mp_rank_00_optim_states.pt@4",
			},
			keep: 2, drop: []string{"ds/global_step1/zero_pp_rank_1_mp_rank_00_optim_states.pt"}},
		{name: "a user's directories",
			files: []string{"ckpt_1/w@1", "ckpt_1/s@1", "ckpt_2/w@2", "ckpt_3/w@3"}, sealed: []string{"ckpt_1", "ckpt_2"},
			patterns: []string{"ckpt_*/"}, keep: 1, drop: []string{"ckpt_1/w", "ckpt_1/s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := rankFiles(t, 0, tc.files...)
			patterns := tc.patterns
			if patterns == nil {
				patterns = DefaultCheckpointPatterns
			}
			kept, drop, sealed, err := Retain(files, tc.sealed, patterns, tc.keep, tc.protect)
			if err != nil {
				t.Fatal(err)
			}
			got := paths(drop, func(f ManifestFile) string { return f.Path })
			want := tc.drop
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("dropped %q; want %q", got, want)
			}
			if len(kept)+len(drop) != len(files) {
				t.Errorf("kept %d + dropped %d != %d files", len(kept), len(drop), len(files))
			}
			for _, s := range sealed {
				if !slices.ContainsFunc(kept, func(f ManifestFile) bool { return strings.HasPrefix(f.Path, s+"/") }) {
					t.Errorf("sealed %q kept without its files", s)
				}
			}
		})
	}
	if _, _, _, err := Retain(nil, nil, DefaultCheckpointPatterns, 0, ""); err == nil || !strings.Contains(err.Error(), "--checkpoint-keep must be 1 or more, got 0") {
		t.Errorf("keep 0: %v", err)
	}
}

// Over random layouts, saves cut short and keep values: retention never deletes a file of a
// unit it keeps, keeps the keep newest complete units whole, keeps the unit resumed from, and
// never leaves the run without the newest complete unit it had.
func TestRetainProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	layouts := []func(i int) (files []string, sealed string){
		func(i int) ([]string, string) { return []string{fmt.Sprintf("step-%d.pt", i)}, "" },
		func(i int) ([]string, string) {
			d := fmt.Sprintf("checkpoint-%d", i)
			return []string{d + "/model.safetensors", d + "/optimizer.pt", d + "/trainer_state.json"}, ""
		},
		func(i int) ([]string, string) {
			d := fmt.Sprintf("global_step%d", i)
			return []string{d + "/mp_rank_00_model_states.pt", d + "/zero_pp_rank_0_mp_rank_00_optim_states.pt"}, d
		},
		func(i int) ([]string, string) {
			d := fmt.Sprintf("iter_%07d", i)
			return []string{d + "/mp_rank_00/model_optim_rng.pt"}, d
		},
		func(i int) ([]string, string) {
			d := fmt.Sprintf("dcp-%d", i)
			return []string{d + "/__0_0.distcp", d + "/.metadata"}, ""
		},
	}
	for iter := 0; iter < 500; iter++ {
		layout := layouts[rng.IntN(len(layouts))]
		keep := 1 + rng.IntN(4)
		saves := rng.IntN(8)
		var files []ManifestFile
		var sealed []string
		completeUnits := map[string]bool{}
		for i := 1; i <= saves; i++ {
			fs, seal := layout(i)
			cut := rng.IntN(4) == 0 // this save was cut short
			if cut {
				fs = fs[:max(1, len(fs)-1)]
				if len(fs) == 1 && seal == "" && !strings.Contains(fs[0], "/") {
					continue // a cut-short file never reaches a manifest
				}
			} else if seal != "" {
				sealed = append(sealed, seal)
			}
			for _, f := range fs {
				files = append(files, mf(t, 0, f, 10, i))
			}
		}
		files = append(files, mf(t, 0, "train.log", 1, 0))
		units := RankUnits(files, sealed, DefaultCheckpointPatterns)
		var complete []Unit
		for _, u := range units {
			if u.Complete {
				complete = append(complete, u)
				completeUnits[u.Path] = true
			}
		}
		protect := ""
		if len(complete) > 0 && rng.IntN(2) == 0 {
			protect = complete[rng.IntN(len(complete))].Path
		}
		kept, _, keptSealed, err := Retain(files, sealed, DefaultCheckpointPatterns, keep, protect)
		if err != nil {
			t.Fatal(err)
		}
		after := RankUnits(kept, keptSealed, DefaultCheckpointPatterns)
		byPath := map[string]Unit{}
		for _, u := range after {
			byPath[u.Path] = u
		}
		// Every unit kept is kept whole: the same files as before.
		for _, u := range units {
			if a, ok := byPath[u.Path]; ok && len(a.Files) != len(u.Files) {
				t.Fatalf("iter %d: unit %s kept in part: %d of %d files", iter, u.Path, len(a.Files), len(u.Files))
			}
		}
		for i, u := range complete {
			a, ok := byPath[u.Path]
			if i < keep && (!ok || !a.Complete) {
				t.Fatalf("iter %d (keep %d): complete unit %s, newest but %d, not kept complete", iter, keep, u.Path, i)
			}
		}
		if protect != "" {
			if a, ok := byPath[protect]; !ok || !a.Complete {
				t.Fatalf("iter %d: the unit resumed from, %s, was not kept", iter, protect)
			}
		}
		n := 0
		for _, u := range after {
			if u.Complete {
				n++
			}
		}
		if want := min(keep, len(complete)); n < want || n > want+1 {
			t.Fatalf("iter %d: %d complete units kept; want %d (or one more, the one resumed from)", iter, n, want)
		}
	}
}

func TestBroadPatterns(t *testing.T) {
	if got := BroadPatterns(DefaultCheckpointPatterns); len(got) != 0 {
		t.Errorf("the defaults take %q", got)
	}
	if got := BroadPatterns([]string{"*"}); !slices.Contains(got, "config.json") || !slices.Contains(got, "latest") {
		t.Errorf("* takes %q", got)
	}
	if got := BroadPatterns([]string{"*.json"}); !reflect.DeepEqual(got, []string{"config.json", HFTrainerState, "status.json", "tokenizer.json"}) {
		t.Errorf("*.json takes %q", got)
	}
	if got := BroadPatterns([]string{"ckpt_*/"}); len(got) != 0 {
		t.Errorf("a directory pattern takes %q", got)
	}
}
