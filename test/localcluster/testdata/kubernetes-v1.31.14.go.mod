// This is a generated file. Do not edit directly.
// Ensure you've carefully read
// https://git.k8s.io/community/contributors/devel/sig-architecture/vendor.md
// Run hack/pin-dependency.sh to change pinned dependency versions.
// Run hack/update-vendor.sh to update go.mod files and the vendor directory.

module k8s.io/kubernetes

go 1.22.0

require (
	bitbucket.org/bertimus9/systemstat v0.5.0
	github.com/JeffAshton/win_pdh v0.0.0-20161109143554-76bb4ee9f0ab
	github.com/Microsoft/go-winio v0.6.0
)

require (
	k8s.io/api v0.0.0
	k8s.io/client-go v0.0.0
	k8s.io/kube-scheduler v0.0.0
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/apimachinery => ./staging/src/k8s.io/apimachinery
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	k8s.io/component-base => ./staging/src/k8s.io/component-base
	k8s.io/endpointslice => ./staging/src/k8s.io/endpointslice
	k8s.io/kube-scheduler => ./staging/src/k8s.io/kube-scheduler
)
