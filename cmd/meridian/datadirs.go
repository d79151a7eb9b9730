package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/meridian-mq/meridian/internal/node"
)

// The two modes lay out their data differently: `standalone` binds --data-dir itself to its
// cluster; `--clusters a,b` keeps one bound data dir per cluster under --data-dir. Their defaults
// are siblings, so running the README's two commands one after the other nests nothing, and a
// data dir of one layout given to the other mode is refused with a message that says so.

// defaultClustersDataDir is the data dir of --clusters when --data-dir is not given.
const defaultClustersDataDir = "./data-clusters"

// checkDataDirLayout refuses a data dir that holds the other mode's layout.
func checkDataDirLayout(dir string, clustersMode bool) error {
	bound, ok, err := node.DataDirCluster(dir)
	if err != nil {
		return err
	}
	if clustersMode {
		if ok {
			return fmt.Errorf("--data-dir %s is the data dir of cluster %q (a `meridian standalone` data dir); "+
				"--clusters keeps one data dir per cluster inside its --data-dir: give it a directory of its own "+
				"(the default is %s)", dir, bound, defaultClustersDataDir)
		}
		return nil
	}
	if ok {
		return nil
	}
	inside, err := boundSubdirs(dir)
	if err != nil {
		return err
	}
	if len(inside) > 0 {
		return fmt.Errorf("--data-dir %s holds the data dirs of clusters %s (a `--clusters` data dir): "+
			"run `meridian standalone --clusters %s --data-dir %s` for those, or give this broker a directory of its own",
			dir, strings.Join(inside, ", "), strings.Join(inside, ","), dir)
	}
	return nil
}

// boundSubdirs lists the clusters of dir's immediate subdirectories that are bound data dirs.
func boundSubdirs(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if c, ok, err := node.DataDirCluster(filepath.Join(dir, e.Name())); err == nil && ok && c == e.Name() {
			names = append(names, c)
		}
	}
	sort.Strings(names)
	return names, nil
}

// checkDataDirs checks the data dir of the mode the settings select (with --clusters' default data
// dir applied when dataDirSet is false).
func checkDataDirs(clusters []string, dataDir string, dataDirSet bool) error {
	clustersMode := len(clusters) > 0
	if err := checkDataDirLayout(dataDir, clustersMode); err != nil {
		return err
	}
	if !clustersMode || dataDirSet {
		return nil
	}
	// --clusters with the default: its clusters' data may still be where the standalone default
	// kept them; say so instead of starting them empty.
	standaloneDefault := node.DefaultOptions().DataDir
	inside, err := boundSubdirs(standaloneDefault)
	if err != nil {
		return err
	}
	for _, name := range clusters {
		for _, c := range inside {
			if c == strings.TrimSpace(name) {
				return fmt.Errorf("cluster %s has a data dir in %s (the earlier default of --clusters); the default is now %s: "+
					"pass --data-dir %s to keep using that data, or move it", c, standaloneDefault, defaultClustersDataDir, standaloneDefault)
			}
		}
	}
	return nil
}
