// Mocha's spec reporter, plus a machine-readable copy of mocha's own stats for CI
// (FLEET_RESULTS_FILE), so a run that executed nothing is visible as such.
'use strict';
const { writeFileSync } = require('node:fs');
const Mocha = require('mocha');

class FleetReporter extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    runner.once('end', () => {
      const { passes, failures, pending, tests, duration } = runner.stats;
      if (process.env.FLEET_RESULTS_FILE) {
        writeFileSync(process.env.FLEET_RESULTS_FILE, JSON.stringify({ passes, failures, pending, tests, duration }));
      }
    });
  }
}

module.exports = FleetReporter;
