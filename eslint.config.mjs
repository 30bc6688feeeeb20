// Lint: typescript-eslint with type information everywhere; workflow code additionally may not
// touch Node APIs, timers or non-workflow Temporal packages (the sandbox would reject them at
// run time, or worse, they would break determinism).
import js from '@eslint/js';
import importX from 'eslint-plugin-import-x';
import tseslint from 'typescript-eslint';
import { builtinModules } from 'node:module';

const nodeBuiltins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];

export default tseslint.config(
  { ignores: ['node_modules/**', '.data/**', 'lib/**', 'eslint.config.mjs', 'scripts/**/*.mjs', 'test/reporter.js', 'bin/**', 'bench/_dbg*.ts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { 'import-x': importX },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'import-x/no-cycle': 'error',
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  {
    files: ['workflows/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: [
            ...nodeBuiltins.map((name) => ({ name, message: 'Workflow code runs in the deterministic sandbox: no Node APIs.' })),
            { name: '@temporalio/client', message: 'Workflows cannot use the client.', allowTypeImports: true },
            { name: '@temporalio/worker', message: 'Workflows cannot use the worker.', allowTypeImports: true },
            { name: '@temporalio/activity', message: 'Workflows cannot use activity APIs.', allowTypeImports: true },
          ],
          patterns: [
            { group: ['../activities/*', '../host-worker/*', '../control-plane/*'], allowTypeImports: true, message: 'Workflows import activities as types only.' },
          ],
        },
      ],
      'no-restricted-globals': [
        'error',
        { name: 'setTimeout', message: 'Use sleep() from @temporalio/workflow.' },
        { name: 'setInterval', message: 'Use a loop with sleep() from @temporalio/workflow.' },
        { name: 'process', message: 'No process access in workflow code.' },
        { name: 'require', message: 'No dynamic requires in workflow code.' },
        { name: 'fetch', message: 'No I/O in workflow code: use an activity.' },
      ],
    },
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
);
