# Sourced by scripts/kubernetes and scripts/kubelet: builds commands of k8s.io/kubernetes through
# the Go module proxy.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and
# replaces them with ./staging/src/...; a dependency's replaces are ignored, so `go install` of its
# commands fails (kubernetes/kubernetes#79384). A small wrapper module requires k8s.io/kubernetes
# and replaces each staging module with its published v0.X.Y instead.

# kubernetes_build VERSION OUT_DIR COMMAND...: in the current (empty) directory, makes the wrapper
# module for k8s.io/kubernetes@VERSION and builds k8s.io/kubernetes/cmd/COMMAND into OUT_DIR.
kubernetes_build() {
  local version=$1 out=$2
  shift 2
  local staging_version=v0.${version#v1.} gomod go_version godebug module name packages=()
  (
    set -euo pipefail
    export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
    go mod init runway.invalid/kubernetes >/dev/null 2>&1
    gomod=$(go mod download -json "k8s.io/kubernetes@$version" \
      | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    go_version=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")
    go mod edit -go="$go_version" -require="k8s.io/kubernetes@$version"
    # Upstream's own godebug line keeps the binaries' runtime behaviour as released.
    godebug=$(sed -n 's/^godebug \(.*\)$/\1/p' "$gomod")
    [ -z "$godebug" ] || go mod edit -godebug="$godebug"
    for module in $(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*$|\1|p' "$gomod"); do
      go mod edit -replace="$module=$module@$staging_version"
    done
    {
      echo '//go:build tools'
      echo 'package tools'
      echo 'import ('
      for name in "$@"; do echo "	_ \"k8s.io/kubernetes/cmd/$name\""; done
      echo ')'
    } >tools.go
    go mod tidy >/dev/null
    for name in "$@"; do packages+=("k8s.io/kubernetes/cmd/$name"); done
    go build -trimpath -o "$out/" \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitVersion=$version" \
      "${packages[@]}"
  )
}
