package triage

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestHealth(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { x := now.Add(-d); return &x }
	pct := func(v float64) *float64 { return &v }
	gib := func(v int64) *int64 { v <<= 30; return &v }
	xid := func(v int) *int { return &v }
	busy := []GPUHealth{{UUID: "GPU-a", Utilization: pct(97), MemoryUsedBytes: gib(40), MemoryTotalBytes: gib(80)}}
	idle := []GPUHealth{{UUID: "GPU-b", Utilization: pct(0), MemoryUsedBytes: gib(40), MemoryTotalBytes: gib(80)}}
	hw := func(x int) bool { return x == 79 }
	tests := []struct {
		name  string
		in    HealthInput
		want  []string // NodeEventName@rank
		words []string // in the messages, in order of the findings
	}{
		{
			name: "healthy",
			in:   HealthInput{Ranks: []RankHealth{{Rank: 0, LastOutput: ago(time.Minute), GPUs: busy}, {Rank: 1, GPUs: busy}}},
		},
		{
			// In DDP only rank 0 prints: a rank silent since its start is no finding.
			name: "never printed is no finding",
			in:   HealthInput{Ranks: []RankHealth{{Rank: 0, LastOutput: ago(time.Minute)}, {Rank: 1}}},
		},
		{
			name:  "one rank silent and idle",
			in:    HealthInput{Ranks: []RankHealth{{Rank: 0, LastOutput: ago(time.Minute), GPUs: busy}, {Rank: 1, LastOutput: ago(20 * time.Minute), GPUs: idle}}, Unbuffered: true},
			want:  []string{"SilentRank@1", "IdleGPUs@1"},
			words: []string{"rank 1 printed last 20m0s ago", "rank 1's GPUs read 5% or less"},
		},
		{
			name:  "buffered output is said",
			in:    HealthInput{Ranks: []RankHealth{{Rank: 0, LastOutput: ago(time.Minute)}, {Rank: 1, LastOutput: ago(20 * time.Minute)}}},
			want:  []string{"SilentRank@1"},
			words: []string{"may sit in a buffer"},
		},
		{
			name: "whole job silent and idle is a likely hang naming the last rank",
			in: HealthInput{Ranks: []RankHealth{
				{Rank: 0, LastOutput: ago(15 * time.Minute), GPUs: idle}, {Rank: 1, LastOutput: ago(12 * time.Minute), GPUs: idle}, {Rank: 2},
			}, Unbuffered: true},
			want:  []string{"LikelyHang@1"},
			words: []string{"no rank has printed for 12m0s; rank 1 printed last"},
		},
		{
			name:  "hang without GPU readings says no GPU verdict",
			in:    HealthInput{Ranks: []RankHealth{{Rank: 0, LastOutput: ago(15 * time.Minute)}}, Unbuffered: true},
			want:  []string{"LikelyHang@0"},
			words: []string{"no rank has printed for 15m0s"},
		},
		{
			name: "memory nearly full",
			in: HealthInput{Ranks: []RankHealth{{Rank: 3, LastOutput: ago(time.Minute), GPUs: []GPUHealth{
				{UUID: "GPU-c", Utilization: pct(90), MemoryUsedBytes: gib(78), MemoryTotalBytes: gib(80)},
			}}}},
			want:  []string{"GPUMemoryFull@3"},
			words: []string{"GPU-c at 98%"},
		},
		{
			name: "progress stalled for three epochs",
			in: HealthInput{Ranks: []RankHealth{{Rank: 0, LastOutput: ago(time.Minute)}},
				Progress: &ProgressHealth{Epoch: 12, TimePerEpoch: 2 * time.Minute, EpochTime: now.Add(-7 * time.Minute)}},
			want:  []string{"ProgressStalled@-1"},
			words: []string{"epoch 12 was reached 7m0s ago, 3 times"},
		},
		{
			name: "progress within three epochs",
			in: HealthInput{Ranks: []RankHealth{{Rank: 0, LastOutput: ago(time.Minute)}},
				Progress: &ProgressHealth{Epoch: 12, TimePerEpoch: 2 * time.Minute, EpochTime: now.Add(-5 * time.Minute)}},
		},
		{
			name: "hardware xid, first seen",
			in: HealthInput{HardwareXid: hw, Ranks: []RankHealth{{Rank: 0, Node: "n1", LastOutput: ago(time.Minute), GPUs: []GPUHealth{
				{UUID: "GPU-d", Xid: xid(79)}, {UUID: "GPU-e", Xid: xid(13)},
			}}}},
			want:  []string{"GPUXid@0"},
			words: []string{"GPU GPU-d on node n1 reports Xid 79 (DCGM keeps the last Xid"},
		},
		{
			name: "hardware xid unchanged while watching is no finding",
			in: HealthInput{HardwareXid: hw, Ranks: []RankHealth{{Rank: 0, LastOutput: ago(time.Minute), GPUs: []GPUHealth{
				{UUID: "GPU-d", Xid: xid(79), XidBefore: xid(79)},
			}}}},
		},
		{
			name: "hardware xid that changed while watching",
			in: HealthInput{HardwareXid: hw, Ranks: []RankHealth{{Rank: 0, LastOutput: ago(time.Minute), GPUs: []GPUHealth{
				{UUID: "GPU-d", Xid: xid(79), XidBefore: xid(0)},
			}}}},
			want:  []string{"GPUXid@0"},
			words: []string{"it was 0 when watching began"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Now = now
			if in.SilentAfter == 0 {
				in.SilentAfter = 10 * time.Minute
			}
			got := Health(in)
			var names []string
			for _, f := range got {
				names = append(names, fmt.Sprintf("%s@%d", f.NodeEventName, f.Rank))
				if f.Suggestion == "" || f.ErrClass == "" {
					t.Errorf("%s has no suggestion or class: %+v", f.NodeEventName, f)
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("findings %v, want %v", names, tc.want)
			}
			for i, w := range tc.words {
				if !strings.Contains(got[i].Message, w) {
					t.Errorf("finding %d: %q lacks %q", i, got[i].Message, w)
				}
			}
		})
	}
}

func TestHealthSuggestionsNameTheJob(t *testing.T) {
	now := time.Now()
	at := func(d time.Duration) *time.Time { v := now.Add(-d); return &v }
	in := HealthInput{Now: now, SilentAfter: time.Minute, Unbuffered: true, Job: "train-1", Namespace: "ml",
		Ranks: []RankHealth{{Rank: 0, LastOutput: at(time.Second)}, {Rank: 1, LastOutput: at(time.Hour)}}}
	got := Health(in)
	want := "see what it last printed with `kubectl tao logs train-1 -n ml --rank 1 --tail 20`; if it is stuck, dump its stacks with " +
		"`kubectl tao stacks train-1 -n ml --rank 1` (a job with the supervisor; else `kubectl tao exec train-1 -n ml --rank 1 -- py-spy dump --pid 1` where the image has py-spy)"
	if len(got) != 1 || got[0].Suggestion != want {
		t.Fatalf("findings %+v, want one SilentRank suggesting %q", got, want)
	}
	in.Job = ""
	if got := Health(in); len(got) != 1 || !strings.Contains(got[0].Suggestion, "`kubectl tao logs JOB --rank 1 --tail 20`") {
		t.Errorf("without the job's name: %+v", got)
	}
}
