#!/usr/bin/env node
// The `fleet` command: runs the TypeScript CLI through tsx's CommonJS loader.
'use strict';
require('tsx/cjs');
require('../control-plane/cli/main.ts');
