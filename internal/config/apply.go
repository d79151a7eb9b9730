package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// FlagValue is one flag given on the command line, as text.
type FlagValue struct{ Name, Value string }

// Sources are where settings come from; Apply takes them in precedence order (the package
// comment).
type Sources struct {
	// FileName names the configuration file in messages; File is its parsed content.
	FileName string
	File     []Entry
	// Environ is the process environment (os.Environ): PULSAR_PREFIX_<key> and
	// MERIDIAN_STANDALONE_<FLAG> variables are read from it, nothing else.
	Environ []string
	// Flags are the flags given on the command line.
	Flags []FlagValue
}

// Report is what Apply did not use. It never holds a value.
type Report struct {
	// Ignored are the keys of the file and of PULSAR_PREFIX_ variables that Meridian does not
	// use (Pulsar's settings of features it does not have), sorted, each once.
	Ignored []string
	// Unknown are those of Ignored that are not Pulsar keys Meridian knows to ignore
	// (pulsarignored.go): a misspelt key lands here.
	Unknown []string
	// Warnings are things worth a log line: a key set twice, an unknown MERIDIAN_STANDALONE_
	// variable.
	Warnings []string
	// Given are the settings some source set, by flag name (or file key for file-only settings).
	Given map[string]bool
}

// given records that a source set k.
func (r *Report) given(k *Key) {
	if r.Given == nil {
		r.Given = map[string]bool{}
	}
	if k.Flag != "" {
		r.Given[k.Flag] = true
	} else {
		r.Given[k.Name] = true
	}
}

// Apply applies the sources to s in precedence order and validates the result (Validate). Every
// problem is reported, each with where it came from (file and line, variable or flag) and the key;
// secret values are never repeated.
func (s *Settings) Apply(src Sources) (Report, error) {
	var rep Report
	var errs []error
	ignored := map[string]bool{}
	lineOf := map[string]int{}

	fileName := src.FileName
	if fileName == "" {
		fileName = "configuration file"
	}
	for _, e := range src.File {
		where := fmt.Sprintf("%s line %d", fileName, e.Line)
		if prev, ok := lineOf[e.Key]; ok {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s: %s is set on lines %d and %d; the last one counts", fileName, e.Key, prev, e.Line))
		}
		lineOf[e.Key] = e.Line
		if err := s.applyFileKey(e.Key, e.Value, ignored, &rep); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
		}
	}
	var flagEnv []string
	for _, kv := range src.Environ {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, PulsarEnvPrefix):
			key := strings.TrimPrefix(name, PulsarEnvPrefix)
			if err := s.applyFileKey(key, value, ignored, &rep); err != nil {
				errs = append(errs, fmt.Errorf("environment %s: %w", name, err))
			}
		case strings.HasPrefix(name, EnvPrefix):
			flagEnv = append(flagEnv, kv)
		}
	}
	s.resolveListeners()

	byEnv := map[string]*Key{}
	for i := range keys {
		if keys[i].Flag != "" {
			byEnv[EnvName(keys[i].Flag)] = &keys[i]
		}
	}
	for _, kv := range flagEnv {
		name, value, _ := strings.Cut(kv, "=")
		k := byEnv[name]
		switch {
		case name == EnvName("config"):
			// Read by the command itself: which file to load.
		case k == nil:
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("environment %s is not a setting of meridian standalone; ignored", name))
		case value == "":
			// An empty variable is treated as unset.
		default:
			rep.given(k)
			if err := k.set(s, value); err != nil {
				errs = append(errs, fmt.Errorf("environment %s (--%s): %w", name, k.Flag, err))
			}
		}
	}
	for _, f := range src.Flags {
		k := byFlag[f.Name]
		if k == nil {
			errs = append(errs, fmt.Errorf("--%s is not a setting", f.Name))
			continue
		}
		rep.given(k)
		if err := k.set(s, f.Value); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", f.Name, err))
		}
	}
	if err := s.finishTLS(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		errs = append(errs, s.Validate())
	}
	for k := range ignored {
		rep.Ignored = append(rep.Ignored, k)
		if ignoredReason(k) == "" {
			rep.Unknown = append(rep.Unknown, k)
		}
	}
	sort.Strings(rep.Ignored)
	sort.Strings(rep.Unknown)
	return rep, errors.Join(errs...)
}

// applyFileKey applies one key of the file (or of a PULSAR_PREFIX_ variable). Keys Meridian does
// not know go to ignored; a flag's name where the file has Pulsar's name for the setting is an
// error that says which name to use.
func (s *Settings) applyFileKey(key, value string, ignored map[string]bool, rep *Report) error {
	k := byName[key]
	if k == nil {
		if kf := byFlag[key]; kf != nil {
			if kf.Name == "" {
				return fmt.Errorf("%s: a configuration file sets the listeners with bindAddress, brokerServicePort, brokerServicePortTls, webServicePort and webServicePortTls", key)
			}
			return fmt.Errorf("%s: in a configuration file this setting is %s", key, kf.Name)
		}
		ignored[key] = true
		return nil
	}
	if value == "" && !k.emptyMeansOff {
		return nil // Pulsar's "key=": the default
	}
	rep.given(k)
	if err := k.set(s, value); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}
