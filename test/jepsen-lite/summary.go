package main

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// summary renders the run's tables: operations by kind and outcome,
// faults, violations by checker, latencies.
func summary(ops []Op, res []checkResult, nm *nemesis, cfg config) string {
	var b strings.Builder
	hs := analyse(ops)
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(&b, "\n== jepsen-lite: %s of faults %v, workloads %v, seed %d, %d history entries\n\n", cfg.Time, cfg.Nemeses, cfg.Workloads, cfg.Seed, len(ops))

	fmt.Fprintln(tw, "operation\ttotal\tgranted\tnot-available\taborted\tunknown\tno outcome\t")
	rows := map[string]*[6]int{}
	for _, h := range hs.holds {
		k := "acquire " + h.workload
		if rows[k] == nil {
			rows[k] = &[6]int{}
		}
		r := rows[k]
		r[0]++
		switch h.outcome {
		case "granted":
			r[1]++
		case "not-available":
			r[2]++
		case "aborted":
			r[3]++
		case "unknown":
			r[4]++
		default:
			r[5]++
		}
	}
	for _, k := range sortedKeys(rows) {
		r := rows[k]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", k, r[0], r[1], r[2], r[3], r[4], r[5])
	}
	count := func(f, typ, result string) int {
		n := 0
		for _, op := range ops {
			if op.F == f && (typ == "" || op.Type == typ) && (result == "" || op.Result == result) {
				n++
			}
		}
		return n
	}
	fmt.Fprintf(tw, "release\t%d\tok %d\t\t\tunknown %d\t\t\n", count("release", "invoke", ""), count("release", "ok", ""), count("release", "info", ""))
	fmt.Fprintf(tw, "query\t%d\tok %d\t\t\tfailed %d\t\t\n", count("query", "invoke", ""), count("query", "ok", ""), count("query", "fail", ""))
	fmt.Fprintf(tw, "register write\t%d\taccepted %d\t\trefused %d\t\t\t\n", count("write", "", ""), count("write", "", "accepted"), count("write", "", "refused"))
	fmt.Fprintf(tw, "lock lost\t%d\tstolen %d\tsession %d\tdeadline %d\tnot-holder %d\t\t\n", count("lost", "", ""), count("lost", "", "stolen"),
		count("lost", "", "session"), count("lost", "", "deadline"), count("lost", "", notHolder))
	recs := recordOps(hs)
	if len(recs) > 0 {
		rows := map[string]*[4]int{} // total, ok, refused, failed or unknown
		for _, o := range recs {
			k := map[string]string{"rec-set": "record set", "rec-delete": "record delete", "release": "release with record", "rec-read": "record read"}[o.f]
			if k == "" {
				continue
			}
			if rows[k] == nil {
				rows[k] = &[4]int{}
			}
			r := rows[k]
			r[0]++
			switch {
			case o.outcome == "ok":
				r[1]++
			case o.result == notHolder:
				r[2]++
			default:
				r[3]++
			}
		}
		for _, k := range sortedKeys(rows) {
			r := rows[k]
			fmt.Fprintf(tw, "%s\t%d\tok %d\t\trefused %d\tfailed/unknown %d\t\t\n", k, r[0], r[1], r[2], r[3])
		}
	}
	if n := count("watch", "", ""); n > 0 {
		resync := 0
		for _, op := range ops {
			if op.F == "watch" && op.Resync {
				resync++
			}
		}
		fmt.Fprintf(tw, "watch event\t%d\tchanges %d\t\tresync %d\terrors %d\t\t\n", n, count("watch", "", "changes"), resync, count("watch", "", "error"))
	}
	tw.Flush()

	fmt.Fprintf(&b, "\nfaults:")
	if nm == nil || len(nm.counts) == 0 {
		fmt.Fprintf(&b, " none")
	} else {
		for _, k := range sortedKeys(nm.counts) {
			fmt.Fprintf(&b, " %s %d", k, nm.counts[k])
		}
		for _, k := range sortedKeys(nm.skipped) {
			fmt.Fprintf(&b, " (%s skipped %d: not supported by the driver)", k, nm.skipped[k])
		}
	}
	fmt.Fprintf(&b, "\n\n")

	tw = tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "checker\tresult\tviolations\t")
	for _, r := range res {
		v := "PASS"
		if !r.Valid {
			v = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t\n", r.Name, v, r.Count)
	}
	tw.Flush()
	for _, r := range res {
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  %s: %s\n", r.Name, n)
		}
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "  %s VIOLATION: %s\n", r.Name, v)
		}
	}

	fmt.Fprintf(&b, "\nlatency (ms)\n")
	tw = tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tn\tp50\tp90\tp99\tmax\t")
	lat := map[string][]time.Duration{}
	for _, h := range hs.holds {
		if h.granted() || h.outcome == "not-available" {
			k := "acquire " + h.workload + " (" + h.outcome + ")"
			lat[k] = append(lat[k], time.Duration(h.complete-h.invoke))
		}
		if h.relOK {
			lat["release"] = append(lat["release"], time.Duration(h.relDone-h.relInvoke))
		}
	}
	for _, q := range hs.queries {
		lat["query"] = append(lat["query"], time.Duration(q.complete-q.invoke))
	}
	for _, o := range recordOps(hs) {
		if k := o.f; o.outcome == "ok" && k != "grant" {
			if k == "release" {
				k = "release with record"
			}
			lat[k] = append(lat[k], time.Duration(o.complete-o.invoke))
		}
	}
	for _, k := range sortedKeys(lat) {
		d := lat[k]
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		pct := func(p float64) string {
			return fmt.Sprintf("%.1f", float64(d[min(len(d)-1, int(p*float64(len(d))))])/1e6)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", k, len(d), pct(0.5), pct(0.9), pct(0.99), pct(1))
	}
	tw.Flush()
	verdict := "VALID: every checker passed"
	if !allValid(res) {
		verdict = "INVALID: see the violations above"
	}
	fmt.Fprintf(&b, "\n%s (history: %s/history.jsonl)\n", verdict, cfg.Out)
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
