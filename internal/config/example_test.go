package config_test

import (
	"fmt"
	"log"

	"github.com/lockd/lockd/internal/config"
)

func ExampleParse() {
	file := []byte(`
apps:
  - name: mp
    provider: wechat
    appid: wx1234
    secret_env: MP_SECRET
    token_api: stable
`)
	env := func(name string) (string, bool) {
		if name == "MP_SECRET" {
			return "app-secret", true
		}
		return "", false
	}
	c, err := config.Parse(file, config.Sources{LookupEnv: env})
	if err != nil {
		log.Fatal(err)
	}
	mp, _ := c.App("mp")
	fmt.Println(mp.Name, mp.WeChat())

	_, err = config.Parse([]byte("apps:\n  - {name: mp, provider: wechat, appid: wx1234, secret_env: NOPE}\n"), config.Sources{LookupEnv: env})
	fmt.Println(err)
	// Output:
	// mp {provider=wechat token_api=stable api_base= appid=wx1234 secret=REDACTED}
	// config: invalid: line 2: apps[0] "mp": secret_env: environment variable NOPE is not set
}
