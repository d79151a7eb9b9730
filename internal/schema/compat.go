package schema

import (
	"fmt"
	"strings"

	"github.com/hamba/avro/v2"
)

// Strategy is a schema compatibility strategy (Pulsar's SchemaCompatibilityStrategy).
type Strategy int

const (
	// StrategyUndefined defers to the next level (namespace → broker default FULL).
	StrategyUndefined Strategy = iota
	StrategyAlwaysIncompatible
	StrategyAlwaysCompatible
	StrategyBackward
	StrategyForward
	StrategyFull
	StrategyBackwardTransitive
	StrategyForwardTransitive
	StrategyFullTransitive
)

// DefaultStrategy is Pulsar's broker default (schemaCompatibilityStrategy=FULL).
const DefaultStrategy = StrategyFull

var strategyNames = []string{"UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD",
	"FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"}

// String is the strategy's name in Pulsar's admin API.
func (s Strategy) String() string {
	if int(s) >= 0 && int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// ParseStrategy parses a strategy name (case-insensitive). Empty is UNDEFINED. Pulsar's older
// namespace policy names (AutoUpdateDisabled, Backward, Forward, Full, AlwaysCompatible,
// BackwardTransitive, ...) are accepted too.
func ParseStrategy(s string) (Strategy, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	if u == "" {
		return StrategyUndefined, nil
	}
	for i, n := range strategyNames {
		if n == u || strings.ReplaceAll(n, "_", "") == u {
			return Strategy(i), nil
		}
	}
	if u == "AUTOUPDATEDISABLED" {
		return StrategyAlwaysIncompatible, nil
	}
	return StrategyUndefined, fmt.Errorf("%w: unknown compatibility strategy %q", ErrInvalidSchema, s)
}

// Resolve returns s, or def when s is UNDEFINED (and DefaultStrategy when both are).
func (s Strategy) Resolve(def Strategy) Strategy {
	if s != StrategyUndefined {
		return s
	}
	if def != StrategyUndefined {
		return def
	}
	return DefaultStrategy
}

// Validate checks that a schema's definition is well-formed for its type: AVRO definitions must
// parse as Avro schemas. JSON and PROTOBUF definitions are not required to (older clients sent
// other JSON-schema dialects), nor are other types' definitions.
func Validate(info Info) error {
	if info.Type == TypeAvro {
		if _, err := parseAvro(info.Data); err != nil {
			return fmt.Errorf("%w: AVRO definition: %v", ErrInvalidSchema, err)
		}
	}
	return nil
}

// Compatible decides whether candidate may be added after the live versions (oldest first,
// tombstones already removed) under strategy s (UNDEFINED means DefaultStrategy). It returns nil
// or an error wrapping ErrIncompatible that says why.
func Compatible(s Strategy, live []Version, candidate Info) error {
	s = s.Resolve(DefaultStrategy)
	if len(live) == 0 || s == StrategyAlwaysCompatible {
		return nil
	}
	if s == StrategyAlwaysIncompatible {
		return fmt.Errorf("%w: the compatibility strategy is ALWAYS_INCOMPATIBLE", ErrIncompatible)
	}
	latest := live[len(live)-1]
	if latest.Type != candidate.Type {
		return fmt.Errorf("%w: the topic's schema is %s, not %s", ErrIncompatible, latest.Type, candidate.Type)
	}
	if !candidate.Type.avroBased() {
		return nil // Pulsar's default check: only ALWAYS_INCOMPATIBLE refuses
	}
	against := live[len(live)-1:]
	switch s {
	case StrategyBackwardTransitive, StrategyForwardTransitive, StrategyFullTransitive:
		against = live
	}
	cand, err := parseAvro(candidate.Data)
	if err != nil {
		if candidate.Type == TypeAvro {
			return fmt.Errorf("%w: AVRO definition: %v", ErrInvalidSchema, err)
		}
		return nil // a JSON/PROTOBUF definition that is not Avro: Pulsar's legacy path accepts it
	}
	checker := avro.NewSchemaCompatibility()
	for i := len(against) - 1; i >= 0; i-- {
		v := against[i]
		if v.Type != candidate.Type {
			return fmt.Errorf("%w: version %d is %s, not %s", ErrIncompatible, v.Version, v.Type, candidate.Type)
		}
		old, err := parseAvro(v.Data)
		if err != nil {
			continue // an old definition that is not Avro cannot be checked; Pulsar skips it too
		}
		backward := s == StrategyBackward || s == StrategyBackwardTransitive || s == StrategyFull || s == StrategyFullTransitive
		forward := s == StrategyForward || s == StrategyForwardTransitive || s == StrategyFull || s == StrategyFullTransitive
		if backward {
			if err := checker.Compatible(cand, old); err != nil {
				return fmt.Errorf("%w: %s: the new schema cannot read data written with version %d: %v", ErrIncompatible, s, v.Version, err)
			}
		}
		if forward {
			if err := checker.Compatible(old, cand); err != nil {
				return fmt.Errorf("%w: %s: version %d cannot read data written with the new schema: %v", ErrIncompatible, s, v.Version, err)
			}
		}
	}
	return nil
}

// parseAvro parses an Avro definition with a private name cache, so that different versions of
// the same named record never collide.
func parseAvro(data []byte) (avro.Schema, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, fmt.Errorf("empty definition")
	}
	return avro.ParseBytesWithCache(data, "", &avro.SchemaCache{})
}
