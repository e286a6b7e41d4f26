'use strict'

// tap's TypeScript plugin hands its children --no-warnings on some Node lines
// (26), through NODE_OPTIONS; package.json turns that plugin off, and a child
// whose process warning a test reads runs without the flag whatever tap does.
function withWarnings (env = process.env) {
  return { ...env, NODE_OPTIONS: (env.NODE_OPTIONS ?? '').replace(/"?--no-warnings"?/g, '') }
}

module.exports = { withWarnings }
