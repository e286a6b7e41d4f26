'use strict'

// tap hands its children --no-warnings on some Node lines (26), through
// NODE_OPTIONS: a child whose process warning a test reads runs without it.
function withWarnings (env = process.env) {
  return { ...env, NODE_OPTIONS: (env.NODE_OPTIONS ?? '').replace(/"?--no-warnings"?/g, '') }
}

module.exports = { withWarnings }
