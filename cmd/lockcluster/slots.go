package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lockcluster/lockcluster"
)

// newSlots is 'lockcluster slots move': moving slots between the Raft
// groups of a cluster of several (serve --groups).
func newSlots(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slots",
		Short: "Move namespaces' slots between the Raft groups of a cluster of several",
		Long: `A cluster of several Raft groups (serve --groups G) hashes each namespace to
one of 4,096 slots, and each slot is served by one group. 'lockcluster
placement NAMESPACE' says which; 'lockcluster slots move' moves slots to
another group while they serve.`,
	}
	var to int
	var namespaces []string
	var noWait bool
	move := &cobra.Command{
		Use:   "move [SLOTS] --to GROUP",
		Short: "Move slots (and their namespaces' locks and sessions) to another group",
		Long: `Move slots to group GROUP. SLOTS is a list of slots and ranges (0 to 4095),
such as 17 or 0-63,100; --namespace-of NAME adds the slot of namespace NAME
(repeatable). Every slot must be served by the same group now.

The slots' namespaces keep serving: their sessions, held locks, queues and
records move with them, their fencing tokens keep growing, and their calls
wait while the slots move (typically milliseconds) instead of failing.
The command returns once every slot is served by GROUP (or, with
--no-wait, once the move has begun).`,
		Example: `  lockcluster placement orders           # which group serves namespace orders
  lockcluster slots move --namespace-of orders --to 2
  lockcluster slots move 0-63 --to 1`,
		Args: cobra.MaximumNArgs(1),
		RunE: g.withAdmin(true, func(ctx context.Context, a *lockcluster.Admin, args []string) error {
			var slots []int
			if len(args) == 1 {
				var err error
				if slots, err = parseSlots(args[0]); err != nil {
					return &exitError{code: exitUsage, msg: err.Error()}
				}
			}
			for _, ns := range namespaces {
				slots = append(slots, lockcluster.SlotOf(ns))
			}
			if len(slots) == 0 {
				return &exitError{code: exitUsage, msg: "usage: lockcluster slots move SLOTS|--namespace-of NAME --to GROUP"}
			}
			if to < 0 {
				return &exitError{code: exitUsage, msg: fmt.Sprintf("--to %d: want a group number (0 and up; 'lockcluster status' lists them)", to)}
			}
			res, err := a.MoveSlots(ctx, slots, to)
			if err != nil {
				return g.exit(err)
			}
			if !noWait {
				if err := waitMoved(ctx, a, slots, to); err != nil {
					return g.exit(err)
				}
			}
			if g.output == "json" {
				return printJSON(os.Stdout, map[string]any{"slots": slots, "fromGroup": res.FromGroup, "toGroup": to, "epoch": res.Epoch, "done": !noWait})
			}
			verb := "moved"
			if noWait {
				verb = "moving"
			}
			fmt.Printf("%s %d slot(s) from group %d to group %d (epoch %d)\n", verb, len(slots), res.FromGroup, to, res.Epoch)
			return nil
		}),
	}
	move.Flags().IntVar(&to, "to", -1, "the group the slots move to")
	move.Flags().StringArrayVar(&namespaces, "namespace-of", nil, "move the slot of this namespace (repeatable)")
	move.Flags().BoolVar(&noWait, "no-wait", false, "return once the move has begun, not once it is done")
	cmd.AddCommand(move)
	return cmd
}

// waitMoved polls until every slot is served by group to, not moving.
func waitMoved(ctx context.Context, a *lockcluster.Admin, slots []int, to int) error {
	for _, s := range slots {
		for {
			p, err := a.Placement(ctx, "", s)
			if err != nil {
				return err
			}
			if p.Group == to && !p.Moving {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("slot %d is not served by group %d yet (group %d, moving %v): %w", s, to, p.Group, p.Moving, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

// parseSlots reads "17", "0-63,100".
func parseSlots(arg string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(arg, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b >= lockcluster.Slots || a > b {
			return nil, fmt.Errorf("slots %q: %q is not a slot (0 to %d) or a range of them (such as 0-63)", arg, part, lockcluster.Slots-1)
		}
		for s := a; s <= b; s++ {
			out = append(out, s)
		}
	}
	return out, nil
}

// newPlacement is 'lockcluster placement'.
func newPlacement(g *globals) *cobra.Command {
	var slot int
	cmd := &cobra.Command{
		Use:   "placement [NAMESPACE]",
		Short: "Say which Raft group serves a namespace (or a slot)",
		Long: `Say which Raft group serves NAMESPACE (default: --namespace), or slot --slot,
as the node asked sees it: the namespace's slot, the group, the slot's
epoch (how many times it moved), whether it is moving and where to, and
the group's leader. A cluster of one group serves every slot in group 0.`,
		Args: cobra.MaximumNArgs(1),
		RunE: g.withAdmin(true, func(ctx context.Context, a *lockcluster.Admin, args []string) error {
			ns := g.namespace
			if len(args) == 1 {
				ns = args[0]
			}
			if slot >= 0 {
				if slot >= lockcluster.Slots {
					return &exitError{code: exitUsage, msg: fmt.Sprintf("--slot %d: want 0 to %d", slot, lockcluster.Slots-1)}
				}
				ns = ""
			}
			p, err := a.Placement(ctx, ns, slot)
			if err != nil {
				return g.exit(err)
			}
			if g.output == "json" {
				return printJSON(os.Stdout, p)
			}
			what := fmt.Sprintf("slot %d", p.Slot)
			if ns != "" {
				what = fmt.Sprintf("namespace %q (slot %d)", ns, p.Slot)
			}
			fmt.Printf("%s: group %d of %d, epoch %d", what, p.Group, p.Groups, p.Epoch)
			if p.Moving {
				fmt.Printf(", moving to group %d", p.ToGroup)
			}
			if p.LeaderID != "" {
				fmt.Printf(", leader %s (%s)", p.LeaderID, p.LeaderAddr)
			}
			fmt.Println()
			return nil
		}),
	}
	cmd.Flags().IntVar(&slot, "slot", -1, "a slot (0 to 4095) instead of a namespace")
	return cmd
}
