'use strict'

// lib/http/undici.js reaches past undici's index into its files (it says
// why). Each must still be the class or object undici's index exports: this
// fails on the first undici release that moves, renames or splits one.
const t = require('tap')
const undici = require('undici')
const reach = require('../lib/http/undici')

t.test('every private file lib/http uses is what undici\'s index exports', async (t) => {
  t.same(Object.keys(reach).sort(), ['Agent', 'Client', 'Dispatcher', 'Dispatcher1Wrapper', 'Pool', 'errors', 'formData', 'isFormDataLike'], 'the whole reach, listed here')
  for (const name of ['Agent', 'Pool', 'Client', 'Dispatcher', 'Dispatcher1Wrapper']) {
    t.equal(reach[name], undici[name], name)
  }
  t.equal(reach.errors, undici.errors, 'errors')
  const { FormData, isFormData } = reach.formData()
  t.equal(FormData, undici.FormData, 'FormData')
  t.equal(isFormData(new undici.FormData()), true, 'its FormData check')
  t.equal(reach.isFormDataLike(new undici.FormData()), true, 'the FormData-like check')
  t.equal(reach.isFormDataLike({}), false)
})

t.test('undici is the major package.json asks for', async (t) => {
  const want = require('../package.json').dependencies.undici.match(/\d+/)[0]
  t.equal(require('undici/package.json').version.split('.')[0], want)
})
