// The TypeScript SDK's linter. The sources and tools get ESLint's and
// typescript-eslint's recommended rules with type information; the tests
// get the recommended rules without it (they read JSON loosely on
// purpose, and node:test's `test()` returns a promise nobody awaits).
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/**", "build-test/**", "node_modules/**", "examples/**", "eslint.config.mjs"] },
  js.configs.recommended,
  {
    // `_name` marks what is left unused on purpose (a field stripped by a destructuring).
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { varsIgnorePattern: "^_", argsIgnorePattern: "^_" }],
    },
  },
  {
    files: ["src/**/*.ts", "tools/**/*.ts"],
    extends: [...tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: { project: ["./tsconfig.json", "./tsconfig.test.json"], tsconfigRootDir: import.meta.dirname },
    },
  },
  {
    files: ["test/**/*.ts"],
    extends: [...tseslint.configs.recommended],
    rules: { "@typescript-eslint/no-explicit-any": "off" },
  },
);
