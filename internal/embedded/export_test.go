package embedded

// MaxUpdateStatements is maxUpdateStatements, for the tests of package
// embedded_test.
const MaxUpdateStatements = maxUpdateStatements
