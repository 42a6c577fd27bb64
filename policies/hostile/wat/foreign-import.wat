;; A component that imports a WASI socket interface. hpcgate must refuse to load it: policies get
;; no network, filesystem, clocks or randomness.
(component
  (import "wasi:sockets/tcp@0.2.0" (instance))
)
