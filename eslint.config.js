'use strict'

module.exports = require('neostandard')({
  ignores: ['.cache/**', '.tap/**', 'coverage/**', 'types/**'],
})
