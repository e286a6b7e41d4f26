'use strict'

module.exports = require('neostandard')({
  ignores: ['.cache/**', '.tap/**', 'coverage/**', 'types/**'],
  // The -r entry point's code, in a file with no extension (see it for why).
  files: ['register'],
})
