package faults

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// keyed is a porcupine input that belongs to one key's partition.
type keyed struct {
	key   string
	token uint64
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var order []string
	for _, op := range history {
		k := op.Input.(keyed).key
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	out := make([][]porcupine.Operation, 0, len(order))
	for _, k := range order {
		out = append(out, byKey[k])
	}
	return out
}

// fencedModel is the fenced resource as a sequential object: its state is
// the highest token accepted; a write is accepted exactly when its token is
// not below it.
var fencedModel = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		highest, tok, accepted := state.(uint64), input.(keyed).token, output.(bool)
		if accepted {
			return tok >= highest, max(highest, tok)
		}
		return tok < highest, highest
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("write(%d) -> accepted=%v", input.(keyed).token, output)
	},
}

// tokenModel is fencing-token issuance as a sequential object: every new
// hold's token is above every token issued before for the key.
var tokenModel = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		highest, tok := state.(uint64), output.(uint64)
		return tok > highest, max(highest, tok)
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("grant -> token %d", output)
	},
}

// checkFencedModel checks the writes to the fenced resource, each from its
// call to its return, for linearizability.
func checkFencedModel(events []Event) porcupine.CheckResult {
	var ops []porcupine.Operation
	for _, e := range events {
		if e.Op == OpWrite {
			ops = append(ops, porcupine.Operation{
				ClientId: e.Client, Input: keyed{key: e.Key, token: e.Token},
				Call: e.Call.UnixNano(), Output: e.OK, Return: e.Return.UnixNano(),
			})
		}
	}
	return porcupine.CheckOperationsTimeout(fencedModel, ops, porcupineTimeout)
}

// checkTokenModel checks the grants of new holds, each from its call to its
// reply, for linearizability as a rising counter.
func checkTokenModel(holds []*hold) porcupine.CheckResult {
	ops := make([]porcupine.Operation, 0, len(holds))
	for _, h := range holds {
		ops = append(ops, porcupine.Operation{
			ClientId: h.client, Input: keyed{key: h.key},
			Call: h.call.UnixNano(), Output: h.token, Return: h.start.UnixNano(),
		})
	}
	return porcupine.CheckOperationsTimeout(tokenModel, ops, porcupineTimeout)
}
