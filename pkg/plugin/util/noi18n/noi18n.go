// Package noi18n keeps kubectl's translation catalogue from being loaded at start-up.
//
// k8s.io/kubectl/pkg/cmd/get (which `kubectl tao list` uses for kubectl get's printing flags)
// translates its help text in package-level variables, so merely linking it made every
// kubectl-tao command, `status` included, unpack and parse kubectl's gettext catalogue at
// start-up, a large part of the binary's package initialisation (docs/benchmarks.md,
// "Start-up"). kubectl-tao's own text is English and never translated, and none of kubectl's
// translated strings reach its output, so the catalogue is never loaded: i18n.T returns its
// English text as is.
//
// Blank-import it from the package that links kubectl's: the Go specification initialises
// packages in import-path order among those whose imports are ready, so this one (imported
// only after k8s.io/kubectl/pkg/util/i18n, and sorting before every k8s.io/ path) runs
// before any k8s.io/kubectl package that calls i18n.T during its own initialisation.
package noi18n

import "k8s.io/kubectl/pkg/util/i18n"

func init() {
	// Fails only if translations were already loaded, which would make this package useless
	// but harmless; TestTranslationsNotLoaded in pkg/plugin catches that.
	_ = i18n.SetLoadTranslationsFunc(func() error { return nil })
}
