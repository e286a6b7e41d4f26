'use strict'

module.exports = require('./batcher')
